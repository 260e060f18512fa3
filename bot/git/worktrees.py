"""A task's worktree from its cut to its end: created (or cut again by ``reopen``) from the
repository holding the task's directory, its diff shown, merged into its base branch in the
repository's own checkout (refused on conflict, nothing changed), pushed (``tip``) or
discarded (refused while it holds work, unless confirmed); its row kept in the store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

from bot.errors import UserInputError
from bot.git import steps
from bot.git.repository import Heads, top_level
from bot.models import RepoHead
from bot.ports import TreeState
from bot.store import Store, WorktreeRow
from bot.store.placement import ACTIVE, DISCARDED, MERGED
from executors.gitguard import GitGuard
from executors.gitscope import PLAIN_DIFF

log = logging.getLogger(__name__)


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


class Worktrees:
    def __init__(self, store: Store, root: Path, guard: GitGuard) -> None:
        self._store = store
        self.root = root.resolve()
        self.guard = guard
        self._reopening = asyncio.Lock()
        self._heads = Heads(guard)

    async def head(self, cwd: Path) -> RepoHead:
        """``Heads.head``: the repository holding ``cwd``, its commit and branch, or a clear
        refusal; what it read serves a worktree cut from it within a moment (``create``)."""
        return await self._heads.head(cwd)

    async def top_level(self, cwd: Path) -> Path | None:
        return await top_level(cwd, self.guard)

    async def head_if_any(self, cwd: Path) -> RepoHead | None:
        """``head``, or None where there is no repository with a commit (no git process when
        no ``.git`` is in sight)."""
        return await self._heads.head_if_any(cwd)

    async def create(
        self, task_id: int, slug: str, cwd: Path, head: RepoHead | None = None
    ) -> Created:
        """``head``: the repository holding ``cwd`` when the caller already looked it up."""
        head = head or await self.head(cwd)
        repo = head.top
        path = self.root / f"{task_id}-{slug}"
        branch = f"detach/{task_id}-{slug}"
        read = self._heads.kept(head)
        await steps.add(self.guard, str(repo), branch, path, head.commit, read=read)
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
            if row.state == MERGED:
                commit = await steps.base_tip(self.guard, row)
            else:
                commit = row.base_commit
            path = Path(row.path)
            await steps.add(self.guard, row.repo_root, row.branch, path, commit, again=True)
            await self._store.worktrees.reopen(task_id, commit)
        log.info("task %s: worktree %s cut again from %s", task_id, row.path, commit)
        return replace(row, base_commit=commit)

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
        git, (within, dirs) = self.guard.git, await steps.scoped_dirs(self.guard, row.path)
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
        await steps.commit(self.guard, row, message)
        repo_dirs = await steps.dirs_of(self.guard, repo, at_repo)
        writes = (Path(repo), repo_dirs.gitdir, repo_dirs.common)
        author = await steps.identity(self.guard)
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
        await steps.remove(self.guard, row, force=False)
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
        await steps.commit(self.guard, row, message)
        head = await self.guard.git(
            row.path, "rev-parse", "--verify", "HEAD^{commit}", within=within
        )
        if head.code != 0 or not head.out:
            raise UserInputError("worktree.failed", error=head.err[-500:])
        return Tip(row, head.out, (await steps.dirs_of(self.guard, row.path, within)).common)

    async def discard(self, task_id: int, confirmed: bool) -> bool:
        """Remove the worktree and its branch; False (nothing removed) when it holds work and
        the removal was not confirmed."""
        row = await self.active(task_id)
        if not confirmed and await self.has_work(row):
            return False
        await steps.remove(self.guard, row, force=True)
        await self._store.worktrees.set_state(task_id, DISCARDED)
        return True
