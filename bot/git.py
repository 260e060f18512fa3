"""Task worktrees: a task can run in its own git worktree on its own branch, cut from the
repository holding its directory and created under the data dir (never inside the repository).
Its card then offers Show diff, Merge (into the base branch; refused on conflict) and Discard
(refused while the worktree holds work, unless confirmed); after either, ``reopen`` cuts it again
at the same path for the task's next turn. Every git here runs through
``executors.gitguard`` (confined; the repository's hooks, fsmonitor, drivers and pager not
run), writing only where the operation must: the git directories, and for a merge the checkout;
a worktree is removed by the bot itself, not by git."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from bot.errors import UserInputError
from bot.models import RepoHead
from bot.ports import TreeState
from bot.store import Store, WorktreeRow
from bot.store.placement import ACTIVE, DISCARDED, MERGED
from executors.gitguard import GitDirs, GitGuard
from executors.gitscope import BASE, PLAIN_DIFF, Scope, line_of, marked_top

log = logging.getLogger(__name__)
# a repository's top, commit and branch, and its git directories, in one rev-parse
HEAD = ("rev-parse", "--show-toplevel", "HEAD", "--abbrev-ref", "HEAD")
HEAD_AND_DIRS = (*HEAD, "--path-format=absolute", "--git-dir", "--git-common-dir")
READ_S = 2.0  # a repository's configuration read with its head serves its worktree's cut this long
FALLBACK = {"user.name": "Detach", "user.email": "detach@localhost"}  # when the owner set none


@dataclass(frozen=True, slots=True)
class Created:
    row: WorktreeRow
    cwd: Path  # the task's directory inside the worktree


@dataclass(frozen=True, slots=True)
class Tip:
    row: WorktreeRow
    commit: str
    common: Path  # the repository's common git directory


@dataclass(frozen=True, slots=True)
class Diff:
    stat: str
    patch: str


async def identity(guard: GitGuard) -> tuple[str, ...]:
    """The author of the commits and merges the bot makes: the owner's own name and e-mail
    from their global git configuration (never a repository's, which an agent may have
    written), each else Detach's."""
    args: list[str] = []
    for key, fallback in FALLBACK.items():
        found = await guard.git("/", "config", "--global", "--get", key, within=BASE)
        args += ["-c", f"{key}={found.out if found.code == 0 and found.out else fallback}"]
    return tuple(args)


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


class Worktrees:
    def __init__(self, store: Store, root: Path, guard: GitGuard) -> None:
        self._store = store
        self.root = root.resolve()
        self.guard = guard
        self._reopening = asyncio.Lock()
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
            return head
        if not lines or not Path(lines[0]).is_absolute():
            raise UserInputError("worktree.not_a_repo", path=str(cwd))
        raise UserInputError("worktree.no_commits", path=lines[0])

    def _keep(self, head: RepoHead, scope: Scope, dirs: GitDirs) -> None:
        now = time.monotonic()
        for key in [k for k, (at, _s, _d) in self._read.items() if now - at > READ_S]:
            del self._read[key]
        self._read[(str(head.top), head.commit)] = (now, scope, dirs)

    def _kept(self, head: RepoHead) -> tuple[Scope, GitDirs] | None:
        """What ``head`` read with ``head``, once, while fresh."""
        at, scope, dirs = self._read.pop((str(head.top), head.commit), (0.0, None, None))
        if scope is None or dirs is None or time.monotonic() - at > READ_S:
            return None
        return scope, dirs

    async def top_level(self, cwd: Path) -> Path | None:
        return await top_level(cwd, self.guard)

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

    async def create(
        self, task_id: int, slug: str, cwd: Path, head: RepoHead | None = None
    ) -> Created:
        """``head``: the repository holding ``cwd`` when the caller already looked it up."""
        head = head or await self.head(cwd)
        repo = head.top
        path = self.root / f"{task_id}-{slug}"
        branch = f"detach/{task_id}-{slug}"
        await self._add(str(repo), branch, path, head.commit, read=self._kept(head))
        base_branch = head.branch or head.commit
        row = WorktreeRow(task_id, str(repo), str(path), branch, base_branch, head.commit, ACTIVE)
        await self._store.worktrees.add(row)
        log.info("task %s: worktree %s on %s (from %s)", task_id, path, branch, base_branch)
        return Created(row, path / cwd.resolve().relative_to(repo))

    async def reopen(self, task_id: int) -> WorktreeRow | None:
        """A merged worktree cut again from its base branch as it is now, a discarded one from
        the commit it started at: at its own path, on its own branch; the row as it was, or
        None when there was nothing to do (no worktree, or an active one)."""
        async with self._reopening:  # a turn and To terminal at once cut it once
            row = await self._store.worktrees.get(task_id)
            if row is None or row.state == ACTIVE:
                return None
            commit = await self._tip(row) if row.state == MERGED else row.base_commit
            await self._add(row.repo_root, row.branch, Path(row.path), commit, again=True)
            await self._store.worktrees.reopen(task_id, commit)
        log.info("task %s: worktree %s cut again from %s", task_id, row.path, commit)
        return replace(row, base_commit=commit)

    async def _add(
        self,
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
        within, dirs = read or await self._scoped_dirs(repo)
        await asyncio.to_thread(path.mkdir, parents=True, exist_ok=True)  # bound writable
        args = ("worktree", "add", "-B" if again else "-b", branch, str(path), commit)
        added = await self.guard.git(repo, *args, within=within, writes=(dirs.common, path))
        if added.code != 0:
            await asyncio.to_thread(_rmdir, path)
            raise UserInputError("worktree.failed", error=added.err[-500:])

    async def _tip(self, row: WorktreeRow) -> str:
        """The commit the branch ``row`` was merged into points at now (refused: it is gone)."""
        ref = f"refs/heads/{row.base_branch}^{{commit}}"
        found = await self.guard.git(row.repo_root, "rev-parse", "--verify", "--quiet", ref)
        if found.code == 0 and found.out:
            return found.out
        if found.err:  # no repository there any more, or git refused it
            raise UserInputError("worktree.failed", error=found.err[-500:])
        raise UserInputError("worktree.base_gone", base=row.base_branch, repo=row.repo_root)

    async def get(self, task_id: int) -> WorktreeRow | None:
        return await self._store.worktrees.get(task_id)

    async def pull_request(self, task_id: int) -> tuple[int, str] | None:
        """The number and address of the pull request its branch was pushed to (``bot.prs``),
        or None."""
        pr = await self._store.prs.get(task_id)
        return (pr.number, pr.url) if pr is not None else None

    async def active(self, task_id: int) -> WorktreeRow:
        row = await self._store.worktrees.get(task_id)
        if row is None:
            raise UserInputError("worktree.none")
        if row.state != ACTIVE:
            raise UserInputError(
                f"worktree.already_{row.state}", branch=row.branch, base=row.base_branch
            )
        return row

    async def offers(
        self, task_id: int, seen: Callable[[], Awaitable[TreeState | None]] | None = None
    ) -> bool:
        """Whether Merge and Discard apply: an active worktree holding work. ``seen``: its
        state as read anyway (a turn's card), asked only for an active one: a changed file
        says yes, its start's commit no; anything else (another top, other commits, nothing
        read) is ``has_work``'s to say."""
        row = await self._store.worktrees.get(task_id)
        if row is None or row.state != ACTIVE:
            return False
        state = await seen() if seen is not None else None
        if state is not None and state.top == row.path:
            if state.dirty:
                return True
            if state.head == row.base_commit:
                return False
        return await self.has_work(row)

    async def diff(self, task_id: int) -> Diff:
        """Everything the task changed since its base: commits and uncommitted files."""
        row = await self.active(task_id)
        git, (within, dirs) = self.guard.git, await self._scoped_dirs(row.path)
        index = (dirs.gitdir, dirs.common)
        await git(row.path, "add", "--intent-to-add", "--all", within=within, writes=index)
        stat = await git(row.path, "diff", *PLAIN_DIFF, "--stat", row.base_commit, within=within)
        patch = await git(row.path, "diff", *PLAIN_DIFF, row.base_commit, within=within)
        return Diff(stat.out, patch.out)

    async def has_work(self, row: WorktreeRow) -> bool:
        """Uncommitted changes, or commits the base branch does not have (one jail for the
        configuration and both: it is on every worktree turn's way to its card)."""
        _scope, ran = await self.guard.batch(
            row.path, ("status", "--porcelain"), ("rev-list", "--count", f"{row.base_commit}..HEAD")
        )
        if len(ran) != 2:  # refused: nothing ran, nothing to offer
            return False
        status, ahead = ran
        return bool(status.out) or (ahead.out.isdigit() and int(ahead.out) > 0)

    async def merge(self, task_id: int, message: str) -> str:
        """Commit what the task left, merge its branch into the base branch in the repository's
        own checkout, then remove the worktree. Refused (nothing changed) on conflict."""
        row = await self.active(task_id)
        if not await self.has_work(row):
            raise UserInputError("worktree.nothing_to_merge", base=row.base_branch)
        git, repo = self.guard.git, row.repo_root
        at_repo = await self.guard.scope(repo)
        current = await git(repo, "symbolic-ref", "--quiet", "--short", "HEAD", within=at_repo)
        if current.out != row.base_branch:
            raise UserInputError(
                "worktree.base_moved",
                repo=repo,
                base=row.base_branch,
                current=current.out or "detached HEAD",
            )
        await self._commit(row, message)
        repo_dirs = await self.dirs(repo, at_repo)
        writes = (Path(repo), repo_dirs.gitdir, repo_dirs.common)
        author = await identity(self.guard)
        args = ("merge", "--no-ff", "--no-edit", "--no-stat", "--no-verify")
        merging = (*author, *args, "-m", f"Merge {row.branch}", row.branch)
        merged = await git(repo, *merging, within=at_repo, writes=writes)
        if merged.code != 0:
            conflicts = await git(repo, "diff", "--name-only", "--diff-filter=U", within=at_repo)
            await git(repo, "merge", "--abort", within=at_repo, writes=writes)
            if conflicts.out:
                raise UserInputError(
                    "worktree.conflict",
                    base=row.base_branch,
                    files=", ".join(conflicts.out.splitlines()[:10]),
                )
            raise UserInputError("worktree.failed", error=(merged.err or merged.out)[-500:])
        await self._remove(row, force=False)
        await self._store.worktrees.set_state(task_id, MERGED)
        return row.base_branch

    async def tip(self, task_id: int, message: str) -> Tip:
        """What a push sends: the task's branch with what it left committed (``message``),
        its commit, and the repository's common git directory (its objects and config)."""
        row = await self.active(task_id)
        within = await self.guard.scope(row.path)
        if within.refusal is not None:  # else it would look like a worktree without work
            raise UserInputError("worktree.failed", error=within.refusal)
        if not await self.has_work(row):
            raise UserInputError("pr.nothing_to_push", base=row.base_branch)
        await self._commit(row, message)
        head = await self.guard.git(
            row.path, "rev-parse", "--verify", "HEAD^{commit}", within=within
        )
        if head.code != 0 or not head.out:
            raise UserInputError("worktree.failed", error=head.err[-500:])
        return Tip(row, head.out, (await self.dirs(row.path, within)).common)

    async def _commit(self, row: WorktreeRow, message: str) -> None:
        """Commit what the task left uncommitted in its worktree (nothing: no commit)."""
        git, (within, dirs) = self.guard.git, await self._scoped_dirs(row.path)
        index = (dirs.gitdir, dirs.common)
        await git(row.path, "add", "--all", within=within, writes=index)
        staged = await git(row.path, "diff", *PLAIN_DIFF, "--cached", "--quiet", within=within)
        if staged.code == 1:
            author = await identity(self.guard)
            args = (*author, "commit", "--quiet", "--no-verify", "-m", message)
            committed = await git(row.path, *args, within=within, writes=index)
            if committed.code != 0:
                raise UserInputError("worktree.failed", error=committed.err[-500:])

    async def discard(self, task_id: int, confirmed: bool) -> bool:
        """Remove the worktree and its branch; False (nothing removed) when it holds work and
        the removal was not confirmed."""
        row = await self.active(task_id)
        if not confirmed and await self.has_work(row):
            return False
        await self._remove(row, force=True)
        await self._store.worktrees.set_state(task_id, DISCARDED)
        return True

    async def dirs(self, cwd: Path | str, within: Scope) -> GitDirs:
        return _found(await self.guard.dirs(cwd, within), within, cwd)

    async def _scoped_dirs(self, cwd: Path | str) -> tuple[Scope, GitDirs]:
        """The Scope and ``dirs`` of ``cwd``, read in one jail."""
        within, dirs = await self.guard.scoped_dirs(cwd)
        return within, _found(dirs, within, cwd)

    async def _remove(self, row: WorktreeRow, force: bool) -> None:
        """The worktree's files and git's record of it, removed by the bot itself (git is
        never given the data directory to write), then its branch."""
        within, dirs = await self._scoped_dirs(row.repo_root)
        record = await asyncio.to_thread(_record, Path(row.path), dirs.common)
        await asyncio.to_thread(shutil.rmtree, row.path, True)
        if record is not None:
            await asyncio.to_thread(shutil.rmtree, record, True)
        deleting = ("branch", "-D" if force else "-d", row.branch)
        await self.guard.git(row.repo_root, *deleting, within=within, writes=(dirs.common,))


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
