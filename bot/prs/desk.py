"""The card's ⬆️ Push and Open PR, for the task's owner: push commits what the task left and
sends its branch to the remote (``bot.prs.push``); Open PR pushes, then opens a draft PR on
GitHub, or links the one already open for the branch. A push after a PR goes to the same PR.
The card says what happened in one line of its own, edited in place; a refusal is one line in
the chat that says what to do."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from pathlib import Path

from bot.errors import UserInputError
from bot.git.worktrees import Worktrees
from bot.models import MessageKind, Task
from bot.prs import body
from bot.prs.github import GitHub, NewPull
from bot.prs.push import Pusher
from bot.prs.remote import Remote, api_host, find_remote, shown
from bot.store import Store
from bot.store.prs import ChecksState, PrRow, PrState
from bot.tasks.lookup import TaskLookup
from bot.telegram.callbacks import PR_ACTIONS, TaskButton
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)
PUSH_LINE = "⬆️"  # the card's line saying where the branch went
PR_LINE = "🔗"  # the card's line following its PR
# refusals said where the button was pressed (an alert); the rest in the chat
ANSWERED_WHERE_ASKED = frozenset(
    {"worktree.none", "worktree.already_merged", "worktree.already_discarded"}
)


@dataclass(frozen=True, slots=True)
class PrConfig:
    remote: str  # DETACH_PR_REMOTE ("": the one the base branch tracks, else origin)
    api_url: str
    repo: str  # DETACH_GITHUB_REPO ("": the remote URL's)
    draft: bool
    notify_failed: bool


class PullRequests:
    def __init__(
        self,
        *,
        store: Store,
        texts: Texts,
        notifier: Notifier,
        worktrees: Worktrees,
        pusher: Pusher,
        github: GitHub,
        config: PrConfig,
    ) -> None:
        self._store = store
        self._texts = self.texts = texts
        self._notifier = self.notifier = notifier
        self._worktrees = worktrees
        self._pusher = pusher
        self.github = github
        self.config = config
        self._lookup = TaskLookup(store, texts)
        self.board_url: str | None = None  # https://: the PR links the task's board page

    async def actions(self, task: Task) -> list[str]:
        """The card's pull request buttons: Push, and Open PR when the remote is on GitHub
        (both when it cannot be told: the tap then says why)."""
        row = await self._worktrees.get(task.id)
        if row is None:
            return list(PR_ACTIONS)
        common = Path(row.repo_root) / ".git"
        if not await asyncio.to_thread(common.is_dir):
            return list(PR_ACTIONS)
        github = (api_host(self.config.api_url), self.config.repo)
        try:
            remote = await find_remote(
                self._worktrees.guard, common, row.base_branch, self.config.remote, github
            )
        except UserInputError:
            return list(PR_ACTIONS)
        return list(PR_ACTIONS) if remote.github else [TaskButton.PUSH]

    async def push(self, user_id: int, task_id: int) -> bool:
        """Pushed (said on the card), or False: refused, and why said in the chat."""
        task = await self._lookup.get_idle(user_id, task_id)
        try:
            _, commit = await self._push(task)
        except UserInputError as exc:
            return await self._refused(task, exc)
        pr = await self._store.prs.get(task.id)
        if pr is not None and pr.state is PrState.OPEN:
            await self._store.prs.put(_moved(pr, commit))
            await self._pushed_to_pr(task, pr)
        return True

    async def open(self, user_id: int, task_id: int) -> bool:
        """The branch pushed and its PR opened (or the open one linked), said on the card; or
        False: refused, and why said in the chat."""
        task = await self._lookup.get_idle(user_id, task_id)
        try:
            remote, commit = await self._push(task)
            if remote.github is None:
                raise UserInputError("pr.not_github", remote=remote.name)
            pr = await self._store.prs.get(task.id)
            if pr is not None and pr.state is PrState.OPEN:
                await self._store.prs.put(_moved(pr, commit))
                await self._pushed_to_pr(task, pr)
                return True
            await self._open(task, remote, commit)
        except UserInputError as exc:
            return await self._refused(task, exc)
        return True

    async def _push(self, task: Task) -> tuple[Remote, str]:
        tip = await self._worktrees.tip(task.id, f"{task.label}: {task.title[:72]}")
        github = (api_host(self.config.api_url), self.config.repo)
        remote = await find_remote(
            self._worktrees.guard, tip.common, tip.row.base_branch, self.config.remote, github
        )
        await self._pinned(task, remote)
        await self._pusher.push(tip.common, remote, tip.commit, tip.row.branch)
        log.info("task %s: pushed %s to %s", task.id, tip.row.branch, remote.name)
        line = self._texts.get(
            task.locale,
            "pr.pushed",
            remote=remote.name,
            url=shown(remote.url),
            branch=tip.row.branch,
            commit=tip.commit[:10],
        )
        await self._on_card(task, PUSH_LINE, line)
        return remote, tip.commit

    async def _pinned(self, task: Task, remote: Remote) -> None:
        """A task with an open PR pushes where it pushed before, or nowhere: a remote's URL
        changed since (by an agent, say) is refused by name."""
        pr = await self._store.prs.get(task.id)
        if pr is None or pr.state is not PrState.OPEN or pr.remote_url in ("", remote.url):
            return
        was, now = shown(pr.remote_url), shown(remote.url)
        raise UserInputError("pr.remote_moved", remote=remote.name, was=was, now=now)

    async def _open(self, task: Task, remote: Remote, commit: str) -> None:
        repo = remote.github or ""
        row = await self._worktrees.active(task.id)
        new = NewPull(
            repo=repo,
            head=row.branch,
            base=row.base_branch,
            title=body.title(task),
            body=await body.body(self._store, self._texts, task, self.board_url),
            draft=self.config.draft,
        )
        pull, created = await self.github.open(new)
        pr = PrRow(task.id, repo, pull.number, pull.url, commit, pull.state, remote_url=remote.url)
        await self._store.prs.put(pr)
        log.info("task %s: PR #%s %s", task.id, pull.number, "opened" if created else "found")
        await self.show(task, pr)
        if not created:  # one was open for the branch already: said, and linked
            text = self._texts.get(task.locale, "pr.exists", url=pull.url, number=pull.number)
            await self._notifier.send(task, text, kind=MessageKind.STATUS)

    async def show(self, task: Task, pr: PrRow) -> None:
        """The card's PR line, as the PR is now."""
        await self._on_card(task, PR_LINE, self._line(task.locale, pr))

    async def listing(self, user_id: int, locale: str) -> str:
        """``/prs``: the open PRs of this user's tasks, each with its checks."""
        lines = []
        for pr in await self._store.prs.open_ones():
            task = await self._store.tasks.get(pr.task_id)
            if task is not None and task.owner_id == user_id:
                lines.append(self._texts.get(locale, "prs.item", label=task.label) + " · ")
                lines[-1] += self._line(locale, pr).removeprefix(PR_LINE).strip()
        if not lines:
            return self._texts.get(locale, "prs.empty")
        return "\n".join([self._texts.get(locale, "prs.header"), *lines])

    def _line(self, loc: str, pr: PrRow) -> str:
        return self._texts.get(
            loc,
            "pr.line",
            url=pr.url,
            number=pr.number,
            state=self._texts.get(loc, f"pr.state_{pr.state}"),
            checks=self._texts.get(loc, f"pr.checks_{pr.checks}"),
        )

    async def _pushed_to_pr(self, task: Task, pr: PrRow) -> None:
        text = self._texts.get(task.locale, "pr.pushed_to_pr", number=pr.number, url=pr.url)
        await self._on_card(task, PUSH_LINE, text)

    async def _on_card(self, task: Task, prefix: str, line: str) -> None:
        if not await self._notifier.card_line(task, prefix, line):
            await self._notifier.send(task, line, kind=MessageKind.STATUS)

    async def _refused(self, task: Task, exc: UserInputError) -> bool:
        if exc.key in ANSWERED_WHERE_ASKED:
            raise exc
        log.info("task %s: push or PR refused: %s", task.id, exc.key)
        text = self._texts.get(task.locale, exc.key, **exc.params)
        await self._notifier.send(task, text, kind=MessageKind.STATUS)
        return False


def _moved(pr: PrRow, commit: str) -> PrRow:
    """The PR after a push of ``commit`` to its branch: its checks start again."""
    return replace(pr, head_sha=commit, checks=ChecksState.NONE)
