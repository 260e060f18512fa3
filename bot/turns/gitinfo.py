"""What a turn changed in its repository: for the completion card, and for another engine that
takes a task over (git through ``executors.gitguard``, bounded, with whatever the agent may
have planted in the repository's configuration neutralised: one ``git config`` read, then the
two commands together)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.git import maybe_in_repository
from bot.telegram.render import shorten
from executors.gitguard import PLAIN_DIFF, Scope, git, scope

TIMEOUT_S = 5.0
MAX_NEW_FILES = 20


async def diff_stat(cwd: str, max_chars: int = 1200) -> str:
    """``git diff --stat`` (tracked changes, staged or not) of the repository holding ``cwd``,
    then its new files (untracked, not ignored); empty when it is not a repository, nothing
    changed, or git is slow or missing."""
    if not in_repository(cwd):
        return ""  # not in a repository: no git process to spawn
    within = await scoped(cwd)
    if within is None:
        return ""
    stat, new = await asyncio.gather(
        output(cwd, within, "diff", "HEAD", "--stat", *PLAIN_DIFF), _new(cwd, within)
    )
    lines = [stat] if stat else []
    lines += listed(new, " {} | new", " … {} more new files")
    return shorten("\n".join(lines), max_chars)


async def diff_text(cwd: str, max_chars: int = 12000) -> str | None:
    """The uncommitted changes of the repository holding ``cwd``: ``git diff HEAD`` and the
    names of its new files, cut to ``max_chars``; None when it is not a repository."""
    if not in_repository(cwd):
        return None
    within = await scoped(cwd)
    if within is None:
        return None
    diff, new = await asyncio.gather(
        output(cwd, within, "diff", "HEAD", *PLAIN_DIFF), _new(cwd, within)
    )
    names = listed(new, "new file (untracked): {}", "… {} more new files")
    text = "\n".join(part for part in (diff, "\n".join(names)) if part)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n… cut: {len(text) - max_chars} more characters"
    return text


def in_repository(cwd: str) -> bool:
    return Path(cwd).is_dir() and maybe_in_repository(Path(cwd))


async def scoped(cwd: str) -> Scope | None:
    """The overrides for git in ``cwd``; None when git would not run there (a moved work tree,
    a configuration git cannot read) or is missing or slow."""
    within = await scope(cwd, TIMEOUT_S)
    return within if within.refusal is None else None


async def _new(cwd: str, within: Scope) -> list[str]:
    """The repository's new files (untracked, not ignored)."""
    return (await output(cwd, within, "ls-files", "--others", "--exclude-standard")).splitlines()


def listed(files: list[str], line: str, more: str) -> list[str]:
    shown = [line.format(name) for name in files[:MAX_NEW_FILES]]
    if len(files) > MAX_NEW_FILES:
        shown.append(more.format(len(files) - MAX_NEW_FILES))
    return shown


async def output(cwd: str, within: Scope, *args: str) -> str:
    """A git command's output in ``cwd``; empty when it fails, is missing or takes too long."""
    try:
        done = await git(cwd, *args, timeout_s=TIMEOUT_S, within=within)
    except OSError:
        return ""
    return done.out if done.code == 0 else ""
