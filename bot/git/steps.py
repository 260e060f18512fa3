"""The git steps of a task's worktree, each run through the guard in the Scope it reads and
writing only where it must: cut it (``add``), commit what the task left (as the owner's own
``identity``), remove it (its files and git's record of it by the bot itself, never git given
the data directory to write; then its branch). A refusal is the owner's ``UserInputError``."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from pathlib import Path

from bot.errors import UserInputError
from bot.store import WorktreeRow
from executors.gitguard import GitDirs, GitGuard
from executors.gitscope import BASE, PLAIN_DIFF, Scope, line_of

FALLBACK = {"user.name": "Detach", "user.email": "detach@localhost"}  # when the owner set none


async def identity(guard: GitGuard) -> tuple[str, ...]:
    """The author of the commits and merges the bot makes: the owner's own name and e-mail
    from their global git configuration (never a repository's, which an agent may have
    written), each else Detach's."""
    args: list[str] = []
    for key, fallback in FALLBACK.items():
        found = await guard.git("/", "config", "--global", "--get", key, within=BASE)
        args += ["-c", f"{key}={found.out if found.code == 0 and found.out else fallback}"]
    return tuple(args)


async def add(
    guard: GitGuard,
    repo: str,
    branch: str,
    path: Path,
    commit: str,
    again: bool = False,
    read: tuple[Scope, GitDirs] | None = None,
) -> None:
    """``git worktree add`` of ``branch`` at ``commit`` into ``path`` (``again``: the
    branch may still be there, and is reset; ``read``: ``repo``'s Scope and directories,
    when just read)."""
    within, dirs = read or await scoped_dirs(guard, repo)
    await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True)  # bound writable
    args = ("worktree", "add", "-B" if again else "-b", branch, str(path), commit)
    added = await guard.git(repo, *args, within=within, writes=(dirs.common, path))
    if added.code != 0:
        await asyncio.to_thread(_rmdir, path)
        raise UserInputError("worktree.failed", error=added.err[-500:])


async def base_tip(guard: GitGuard, row: WorktreeRow) -> str:
    """The commit the branch ``row`` was merged into points at now (refused: it is gone)."""
    ref = f"refs/heads/{row.base_branch}^{{commit}}"
    found = await guard.git(row.repo_root, "rev-parse", "--verify", "--quiet", ref)
    if found.code == 0 and found.out:
        return found.out
    if found.err:  # no repository there any more, or git refused it
        raise UserInputError("worktree.failed", error=found.err[-500:])
    raise UserInputError("worktree.base_gone", base=row.base_branch, repo=row.repo_root)


async def commit(guard: GitGuard, row: WorktreeRow, message: str) -> None:
    """Commit what the task left uncommitted in its worktree (nothing: no commit)."""
    git, (within, dirs) = guard.git, await scoped_dirs(guard, row.path)
    index = (dirs.gitdir, dirs.common)
    await git(row.path, "add", "--all", within=within, writes=index)
    staged = await git(row.path, "diff", *PLAIN_DIFF, "--cached", "--quiet", within=within)
    if staged.code == 1:
        author = await identity(guard)
        args = (*author, "commit", "--quiet", "--no-verify", "-m", message)
        committed = await git(row.path, *args, within=within, writes=index)
        if committed.code != 0:
            raise UserInputError("worktree.failed", error=committed.err[-500:])


async def remove(guard: GitGuard, row: WorktreeRow, force: bool) -> None:
    """The worktree's files and git's record of it, removed by the bot itself (git is
    never given the data directory to write), then its branch."""
    within, dirs = await scoped_dirs(guard, row.repo_root)
    record = await asyncio.to_thread(_record, Path(row.path), dirs.common)
    await asyncio.to_thread(shutil.rmtree, row.path, True)
    if record is not None:
        await asyncio.to_thread(shutil.rmtree, record, True)
    deleting = ("branch", "-D" if force else "-d", row.branch)
    await guard.git(row.repo_root, *deleting, within=within, writes=(dirs.common,))


async def dirs_of(guard: GitGuard, cwd: Path | str, within: Scope) -> GitDirs:
    """The git directories of ``cwd`` as ``within`` sees them (refused: the owner's error)."""
    return _found(await guard.dirs(cwd, within), within, cwd)


async def scoped_dirs(guard: GitGuard, cwd: Path | str) -> tuple[Scope, GitDirs]:
    """The Scope and ``dirs_of`` of ``cwd``, read in one jail."""
    within, found = await guard.scoped_dirs(cwd)
    return within, _found(found, within, cwd)


def _record(path: Path, common: Path) -> Path | None:
    """Git's record of the linked worktree at ``path`` (``<common>/worktrees/<name>``), when
    both sides name each other; else None (then git prunes it itself one day)."""
    named = line_of(path / ".git")
    if named is None or not named.startswith("gitdir: "):
        return None
    record = Path(named.removeprefix("gitdir: ").strip())
    back = line_of(record / "gitdir")
    if record.parent != common / "worktrees" or back is None:
        return None
    return record if Path(back) == path / ".git" else None


def _rmdir(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.rmdir()  # only if git left it empty


def _found(dirs: GitDirs | None, within: Scope, cwd: Path | str) -> GitDirs:
    """``dirs``, or the owner's error: the repository refused, or no git there."""
    if dirs is None:
        raise UserInputError("worktree.failed", error=within.refusal or f"no git at {cwd}")
    return dirs
