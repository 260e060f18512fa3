"""The pull requests' objects, built from the settings for the composition root."""

from __future__ import annotations

from collections.abc import Mapping

from bot.git.worktrees import Worktrees
from bot.prs.desk import PrConfig, PullRequests
from bot.prs.github import GitHub
from bot.prs.push import Pusher
from bot.prs.token import Token
from bot.settings import Settings
from bot.store import Store
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts


def make_prs(
    settings: Settings,
    environ: Mapping[str, str],
    *,
    store: Store,
    texts: Texts,
    notifier: Notifier,
    worktrees: Worktrees,
) -> PullRequests:
    configured = settings.github_token.get_secret_value() if settings.github_token else ""
    prs = PullRequests(
        store=store,
        texts=texts,
        notifier=notifier,
        worktrees=worktrees,
        pusher=Pusher(environ, settings.pr_push_timeout_s),
        github=GitHub(settings.github_api_url, Token(settings.gh_bin, environ, configured)),
        config=PrConfig(
            remote=settings.pr_remote,
            api_url=settings.github_api_url,
            repo=settings.github_repo,
            draft=settings.pr_draft,
            notify_failed=settings.pr_notify_failed,
        ),
    )
    prs.board_url = settings.public_url.rstrip("/") if settings.public_url else None
    notifier.offer_prs(prs.actions)  # Push only where the remote is not on GitHub
    return prs
