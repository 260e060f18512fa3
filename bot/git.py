"""Task worktrees: a task can run in its own git worktree on its own branch, cut from the
repository holding its directory and created under the data dir (never inside the repository).
Its card then offers Show diff, Merge (into the base branch; refused on conflict) and Discard
(refused while the worktree holds work, unless confirmed). Every git here runs through
``executors.gitguard``: the repository's hooks, fsmonitor, drivers and pager are not run."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from bot.errors import UserInputError
from bot.models import RepoHead
from bot.store import Store, WorktreeRow
from bot.store.placement import ACTIVE, DISCARDED, MERGED
from executors.gitguard import BASE, PLAIN_DIFF, git, scope

log = logging.getLogger(__name__)
FALLBACK = {"user.name": "Detach", "user.email": "detach@localhost"}  # when the owner set none


@dataclass(frozen=True, slots=True)
class Created:
    row: WorktreeRow
    cwd: Path  # the task's directory inside the worktree


@dataclass(frozen=True, slots=True)
class Diff:
    stat: str
    patch: str


async def identity() -> tuple[str, ...]:
    """The author of the commits and merges the bot makes: the owner's own name and e-mail
    from their global git configuration (never a repository's, which an agent may have
    written), each else Detach's."""
    args: list[str] = []
    for key, fallback in FALLBACK.items():
        found = await git("/", "config", "--global", "--get", key, within=BASE)
        args += ["-c", f"{key}={found.out if found.code == 0 and found.out else fallback}"]
    return tuple(args)


def maybe_in_repository(cwd: Path) -> bool:
    """A work tree's ``.git`` in ``cwd`` or above: the cheap test before asking git itself."""
    return _marked_top(cwd) is not None


def _marked_top(cwd: Path) -> Path | None:
    """The nearest of ``cwd`` and its parents that git's own discovery would take for a work
    tree's top: a ``.git`` directory holding ``HEAD``, or a ``.git`` file naming its git
    directory (a linked worktree, a submodule)."""
    path = cwd.resolve()
    for candidate in (path, *path.parents):
        marker = candidate / ".git"
        try:
            if marker.is_dir():
                if (marker / "HEAD").is_file():
                    return candidate
            elif marker.is_file() and marker.read_bytes()[:8] == b"gitdir: ":
                return candidate
        except OSError:
            return None
    return None


async def top_level(cwd: Path) -> Path | None:
    """The top of the git repository holding ``cwd``, or None. Found by looking at the
    directories (no git process: this runs for every new task, before its agent starts);
    git itself is asked only for a repository this user does not own, which git refuses
    unless ``safe.directory`` allows it."""
    top = _marked_top(cwd)
    if top is None:
        return None
    try:
        owned = top.stat().st_uid == os.geteuid()
    except OSError:
        return None
    if owned:
        return top
    asked = await git(cwd, "rev-parse", "--show-toplevel", within=BASE)
    return Path(asked.out).resolve() if asked.code == 0 and asked.out else None


class Worktrees:
    def __init__(self, store: Store, root: Path) -> None:
        self._store = store
        self.root = root.resolve()

    async def head(self, cwd: Path) -> RepoHead:
        """The repository holding ``cwd`` and its current commit and branch (one git process),
        or a clear refusal: not a repository, or one without a commit yet. (``rev-parse`` runs
        no driver: the fixed overrides are enough; a moved work tree is refused by ``create``.)"""
        args = ("rev-parse", "--show-toplevel", "HEAD", "--abbrev-ref", "HEAD")
        found = await git(cwd, *args, within=BASE)
        lines = found.out.splitlines()
        if found.code == 0 and len(lines) == 3:
            branch = lines[2] if lines[2] != "HEAD" else None  # HEAD: detached
            return RepoHead(Path(lines[0]).resolve(), lines[1], branch)
        if not lines or not Path(lines[0]).is_absolute():
            raise UserInputError("worktree.not_a_repo", path=str(cwd))
        raise UserInputError("worktree.no_commits", path=lines[0])

    async def top_level(self, cwd: Path) -> Path | None:
        return await top_level(cwd)

    async def head_if_any(self, cwd: Path) -> RepoHead | None:
        """``head``, or None where there is no repository with a commit (no git process when
        no ``.git`` is in sight)."""
        if not maybe_in_repository(cwd):
            return None
        try:
            return await self.head(cwd)
        except UserInputError:
            return None

    async def create(
        self, task_id: int, slug: str, cwd: Path, head: RepoHead | None = None
    ) -> Created:
        """``head``: the repository holding ``cwd`` when the caller already looked it up."""
        head = head or await self.head(cwd)
        repo = head.top
        path = self.root / f"{task_id}-{slug}"
        branch = f"detach/{task_id}-{slug}"
        self.root.mkdir(parents=True, exist_ok=True)
        added = await git(repo, "worktree", "add", "-b", branch, str(path), head.commit)
        if added.code != 0:
            raise UserInputError("worktree.failed", error=added.err[-500:])
        base_branch = head.branch or head.commit
        row = WorktreeRow(task_id, str(repo), str(path), branch, base_branch, head.commit, ACTIVE)
        await self._store.worktrees.add(row)
        log.info("task %s: worktree %s on %s (from %s)", task_id, path, branch, base_branch)
        return Created(row, path / cwd.resolve().relative_to(repo))

    async def get(self, task_id: int) -> WorktreeRow | None:
        return await self._store.worktrees.get(task_id)

    async def active(self, task_id: int) -> WorktreeRow:
        row = await self._store.worktrees.get(task_id)
        if row is None:
            raise UserInputError("worktree.none")
        if row.state != ACTIVE:
            raise UserInputError(f"worktree.already_{row.state}", branch=row.branch)
        return row

    async def diff(self, task_id: int) -> Diff:
        """Everything the task changed since its base: commits and uncommitted files."""
        row = await self.active(task_id)
        within = await scope(row.path)
        await git(row.path, "add", "--intent-to-add", "--all", within=within)  # new files show
        stat = await git(row.path, "diff", *PLAIN_DIFF, "--stat", row.base_commit, within=within)
        patch = await git(row.path, "diff", *PLAIN_DIFF, row.base_commit, within=within)
        return Diff(stat.out, patch.out)

    async def has_work(self, row: WorktreeRow) -> bool:
        """Uncommitted changes, or commits the base branch does not have."""
        within = await scope(row.path)
        status = await git(row.path, "status", "--porcelain", within=within)
        ahead = await git(row.path, "rev-list", "--count", f"{row.base_commit}..HEAD", within=BASE)
        return bool(status.out) or (ahead.out.isdigit() and int(ahead.out) > 0)

    async def merge(self, task_id: int, message: str) -> str:
        """Commit what the task left, merge its branch into the base branch in the repository's
        own checkout, then remove the worktree. Refused (nothing changed) on conflict."""
        row = await self.active(task_id)
        current = await git(
            row.repo_root, "symbolic-ref", "--quiet", "--short", "HEAD", within=BASE
        )
        if current.out != row.base_branch:
            raise UserInputError(
                "worktree.base_moved",
                repo=row.repo_root,
                base=row.base_branch,
                current=current.out or "detached HEAD",
            )
        within, author = await scope(row.path), await identity()
        await git(row.path, "add", "--all", within=within)
        staged = await git(row.path, "diff", *PLAIN_DIFF, "--cached", "--quiet", within=within)
        if staged.code == 1:
            committed = await git(
                row.path,
                *author,
                "commit",
                "--quiet",
                "--no-verify",
                "-m",
                message,
                within=within,
            )
            if committed.code != 0:
                raise UserInputError("worktree.failed", error=committed.err[-500:])
        merged = await git(
            row.repo_root,
            *author,
            "merge",
            "--no-ff",
            "--no-edit",
            "--no-stat",
            "--no-verify",
            "-m",
            f"Merge {row.branch}",
            row.branch,
        )
        if merged.code != 0:
            conflicts = await git(row.repo_root, "diff", "--name-only", "--diff-filter=U")
            await git(row.repo_root, "merge", "--abort")
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

    async def discard(self, task_id: int, confirmed: bool) -> bool:
        """Remove the worktree and its branch; False (nothing removed) when it holds work and
        the removal was not confirmed."""
        row = await self.active(task_id)
        if not confirmed and await self.has_work(row):
            return False
        await self._remove(row, force=True)
        await self._store.worktrees.set_state(task_id, DISCARDED)
        return True

    async def _remove(self, row: WorktreeRow, force: bool) -> None:
        removed = await git(
            row.repo_root, "worktree", "remove", *(["--force"] if force else []), row.path
        )
        if removed.code != 0 and Path(row.path).exists():
            if not force:
                raise UserInputError("worktree.failed", error=removed.err[-500:])
            shutil.rmtree(row.path, ignore_errors=True)
            await git(row.repo_root, "worktree", "prune", within=BASE)
        await git(row.repo_root, "branch", "-D" if force else "-d", row.branch, within=BASE)
