"""What the inbox reads and writes of the record for a task file: its owner's language, the
parent a sub-task's file names (checked: the same owner, may start sub-tasks, has room for one
more; ``bot.tasks.lineage``), and the finished tasks that came as files, each rendered back
(``bot.tasks.export``) until it is marked written."""

from __future__ import annotations

from bot.models import Task, TaskStatus
from bot.store import Store
from bot.tasks.export import export
from bot.tasks.lineage import Lineage, depth_of, spent_below
from bot.tasks.taskfile import TaskFileError
from bot.telegram.texts import Texts


class TaskFiling:
    def __init__(
        self, store: Store, texts: Texts, max_subtasks: int = 5, max_depth: int = 2
    ) -> None:
        """``max_subtasks``: DETACH_MAX_SUBTASKS, the most sub-tasks one parent starts;
        ``max_depth``: DETACH_SUBTASK_DEPTH."""
        self._store = store
        self._texts = texts
        self._max_subtasks = max_subtasks
        self._max_depth = max_depth

    async def locales(self) -> dict[int, str]:
        """Each user's /lang choice (a user who made none: absent)."""
        return await self._store.users.locales()

    async def lineage(self, parent_id: int, owner: int) -> Lineage:
        """A sub-task's parent: a task of the same owner whose agent may start sub-tasks, and
        has started fewer than ``max_subtasks``; with what caps its child's rights.
        Raises TaskFileError with the reason."""
        parent = await self._store.tasks.get(parent_id)
        if parent is None or parent.owner_id != owner or not parent.subtasks:
            raise TaskFileError(f"parent: #{parent_id} is no task that may start sub-tasks")
        children = await self._store.tasks.children(parent_id)
        if len(children) >= self._max_subtasks:
            raise TaskFileError(
                f"parent: #{parent_id} has started {len(children)} sub-tasks, the most it may "
                "(DETACH_MAX_SUBTASKS)"
            )
        left = None
        if parent.max_usd is not None:
            spent = parent.total_cost_usd + await spent_below(self._store, parent_id)
            left = parent.max_usd - spent
        in_worktree = await self._store.worktrees.get(parent_id) is not None
        depth = await depth_of(self._store, parent)
        return Lineage(parent, in_worktree, left, depth, self._max_depth)

    async def finished(self) -> list[tuple[Task, str]]:
        """The finished tasks that came as files and are not written back yet, each with its
        completed task file (an interrupted one waits: it may be resumed)."""
        done = []
        for task_id in await self._store.task_files.unexported():
            task = await self._store.tasks.get(task_id)
            if task is None or task.status.active or task.status is TaskStatus.INTERRUPTED:
                continue
            done.append((task, await export(self._store, task.id, self._texts)))
        return done

    async def written(self, task: Task) -> None:
        """``task``'s completed file is written: it is not rendered again."""
        await self._store.task_files.exported(task.id)
