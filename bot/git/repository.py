"""The repository holding a directory: whether there is one (a look at the directories, no git
process), its top, and its head, read with its configuration and git directories in one jail and
kept a moment for the worktree cut from it."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from bot.errors import UserInputError
from bot.models import RepoHead
from executors.gitguard import GitDirs, GitGuard
from executors.gitscope import BASE, Scope, line_of, marked_top

# a repository's top, commit and branch, and its git directories, in one rev-parse
HEAD = ("rev-parse", "--show-toplevel", "HEAD", "--abbrev-ref", "HEAD")
HEAD_AND_DIRS = (*HEAD, "--path-format=absolute", "--git-dir", "--git-common-dir")
READ_S = 2.0  # a repository's configuration read with its head serves its worktree's cut this long
AHEAD_AFTER_S = 1.0  # the next head's jail is started this long after a head is read


async def in_repository(cwd: Path) -> bool:
    """A work tree's ``.git`` in ``cwd`` (a directory) or above: the cheap test before asking
    git itself (off the event loop: an agent may have made any of it a FIFO)."""
    return await asyncio.to_thread(_marked_top, cwd) is not None


def _marked_top(cwd: Path) -> Path | None:
    """The nearest of ``cwd`` and its parents that git's own discovery would take for a work
    tree's top: a ``.git`` directory holding ``HEAD``, or a ``.git`` file naming its git
    directory (a linked worktree, a submodule). Blocking; None when ``cwd`` is no directory."""
    try:
        path = cwd.resolve()
        if not path.is_dir():
            return None
    except (OSError, RuntimeError):
        return None
    for candidate in (path, *path.parents):
        marker = candidate / ".git"
        try:
            if marker.is_dir():
                if (marker / "HEAD").is_file():
                    return candidate
            elif (line_of(marker) or "").startswith("gitdir: "):
                return candidate
        except OSError:
            return None
    return None


async def top_level(cwd: Path, guard: GitGuard) -> Path | None:
    """The top of the git repository holding ``cwd``, or None. Found by looking at the
    directories (no git process: this runs for every new task, before its agent starts);
    git itself is asked only for a repository this user does not own, which git refuses
    unless ``safe.directory`` allows it."""
    top = await asyncio.to_thread(_marked_top, cwd)
    if top is None:
        return None
    try:
        owned = top.stat().st_uid == os.geteuid()
    except OSError:
        return None
    if owned:
        return top
    asked = await guard.git(cwd, "rev-parse", "--show-toplevel", within=BASE)
    return Path(asked.out).resolve() if asked.code == 0 and asked.out else None


class Heads:
    """Repositories' heads, each read with its Scope and git directories, which a worktree
    cut from that head within READ_S takes (``kept``) instead of reading them again."""

    def __init__(self, guard: GitGuard) -> None:
        self.guard = guard
        # (top, commit) -> when, and the Scope and directories read with that head (``head``)
        self._read: dict[tuple[str, str], tuple[float, Scope, GitDirs]] = {}

    async def head(self, cwd: Path) -> RepoHead:
        """The repository holding ``cwd`` and its current commit and branch, or a clear
        refusal: not a repository, one without a commit yet, or one git is not run in. Its
        configuration and git directories are read in the same jail: a worktree cut from
        this head within READ_S takes them (``create``; a moved work tree is refused there)."""
        scope, ran = await self.guard.batch(cwd, HEAD_AND_DIRS)
        if scope.refusal is not None or not ran:
            raise UserInputError("worktree.failed", error=scope.refusal or f"no git at {cwd}")
        lines = ran[0].out.splitlines()
        if ran[0].code == 0 and len(lines) == 5:
            branch = lines[2] if lines[2] != "HEAD" else None  # HEAD: detached
            head = RepoHead(Path(lines[0]).resolve(), lines[1], branch)
            # the Scope was judged (``foreign``) at the ``.git`` nearest ``cwd``: kept only when
            # that is the top git found (a decoy ``.git`` below it must not vouch for the top)
            if await asyncio.to_thread(marked_top, cwd) == head.top:
                self._keep(head, scope, GitDirs(Path(lines[3]), Path(lines[4])))
            # the next head here (the chat's next /detach) takes a jail started ahead, once
            # this one's worktree is cut and its agent started
            await self.guard.prepare(cwd, HEAD_AND_DIRS, after_s=AHEAD_AFTER_S)
            return head
        if not lines or not Path(lines[0]).is_absolute():
            raise UserInputError("worktree.not_a_repo", path=str(cwd))
        raise UserInputError("worktree.no_commits", path=lines[0])

    def _keep(self, head: RepoHead, scope: Scope, dirs: GitDirs) -> None:
        now = time.monotonic()
        for key in [k for k, (at, _s, _d) in self._read.items() if now - at > READ_S]:
            del self._read[key]
        self._read[(str(head.top), head.commit)] = (now, scope, dirs)

    def kept(self, head: RepoHead) -> tuple[Scope, GitDirs] | None:
        """What ``head`` read with ``head``, once, while fresh."""
        at, scope, dirs = self._read.pop((str(head.top), head.commit), (0.0, None, None))
        if scope is None or dirs is None or time.monotonic() - at > READ_S:
            return None
        return scope, dirs

    async def head_if_any(self, cwd: Path) -> RepoHead | None:
        """``head``, or None where there is no repository with a commit (no git process when
        no ``.git`` is in sight)."""
        if not await in_repository(cwd):
            return None
        try:
            return await self.head(cwd)
        except UserInputError as exc:
            if exc.key == "worktree.failed":  # a repository, refused: said, as its cut would
                raise
            return None
