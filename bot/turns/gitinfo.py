"""What a turn changed in its repository: for the completion card, and for another engine that
takes a task over (git through ``executors.gitguard``: confined, bounded, with whatever the
agent may have planted in the repository's configuration neutralised: one ``git config`` read,
then the two commands together)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from bot.git.repository import in_repository
from bot.telegram.render import shorten
from executors.gitguard import GitGuard
from executors.gitscope import PLAIN_DIFF, Scope

TIMEOUT_S = 5.0
MAX_NEW_FILES = 20


@dataclass(frozen=True, slots=True)
class Within:
    """A repository's Scope and the guard that runs git under it."""

    guard: GitGuard
    scope: Scope


async def diff_stat(guard: GitGuard, cwd: str, max_chars: int = 1200) -> str:
    """``git diff --stat`` (tracked changes, staged or not) of the repository holding ``cwd``,
    then its new files (untracked, not ignored); empty when it is not a repository, nothing
    changed, or git is slow or missing."""
    if not await in_repository(Path(cwd)):
        return ""  # not in a repository: no git process to spawn
    within = await scoped(guard, cwd)
    if within is None:
        return ""
    stat, new = await asyncio.gather(
        output(cwd, within, "diff", "HEAD", "--stat", *PLAIN_DIFF), _new(cwd, within)
    )
    lines = [stat] if stat else []
    lines += listed(new, " {} | new", " … {} more new files")
    return shorten("\n".join(lines), max_chars)


async def diff_text(guard: GitGuard, cwd: str, max_chars: int = 12000) -> str | None:
    """The uncommitted changes of the repository holding ``cwd``: ``git diff HEAD`` and the
    names of its new files, cut to ``max_chars``; None when it is not a repository."""
    if not await in_repository(Path(cwd)):
        return None
    within = await scoped(guard, cwd)
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


async def scoped(guard: GitGuard, cwd: str) -> Within | None:
    """The overrides for git in ``cwd``; None when git would not run there (a moved work tree,
    a repository that fetches on demand, a configuration git cannot read) or is missing or
    slow."""
    scope = await guard.scope(cwd, TIMEOUT_S)
    return Within(guard, scope) if scope.refusal is None else None


async def _new(cwd: str, within: Within) -> list[str]:
    """The repository's new files (untracked, not ignored)."""
    return (await output(cwd, within, "ls-files", "--others", "--exclude-standard")).splitlines()


def listed(files: list[str], line: str, more: str) -> list[str]:
    shown = [line.format(name) for name in files[:MAX_NEW_FILES]]
    if len(files) > MAX_NEW_FILES:
        shown.append(more.format(len(files) - MAX_NEW_FILES))
    return shown


async def output(cwd: str, within: Within, *args: str) -> str:
    """A git command's output in ``cwd``; empty when it fails, is missing or takes too long."""
    try:
        done = await within.guard.git(cwd, *args, timeout_s=TIMEOUT_S, within=within.scope)
    except OSError:
        return ""
    return done.out if done.code == 0 else ""
