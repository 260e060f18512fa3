"""What a surface that only looks (the board and its live streams) reads of a user's tasks: the
list with what each waits for, a task's page (turns, checks, pending questions), its transcript
lines. Only the owner's tasks: another user's is reported exactly like a missing one (``None``,
or nothing)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.models import CheckResult, Task, TaskStatus, Turn, WaitState
from bot.rows import PendingQuestion, TranscriptLine
from bot.store import Store
from bot.store.prs import PrRow

TURNS_SHOWN = 200
__all__ = ["PrRow", "TaskPage", "TaskReads", "TaskRow"]


@dataclass(frozen=True, slots=True)
class TaskRow:
    """A task as a list shows it: ``wait``, what it waits for; ``worktree``, its worktree's
    state (None: it has none); ``ran``, the model its newest turn ran (None: none named)."""

    task: Task
    wait: WaitState | None
    worktree: str | None
    ran: str | None = None
    host: str | None = None  # the host its newest turn ran on (scale-out; None: this one)


@dataclass(frozen=True, slots=True)
class TaskPage:
    """A task's page: what it waits for, the model that ran it, its newest turns (oldest
    first), each checked turn's seq and check, and the questions waiting for the owner."""

    task: Task
    wait: WaitState | None
    ran: str | None
    turns: tuple[Turn, ...]
    checks: tuple[tuple[int, CheckResult], ...]
    pending: tuple[PendingQuestion, ...]
    pr: PrRow | None = None  # the pull request its card follows (``bot.prs``)
    host: str | None = None  # the host its newest turn ran on (scale-out)


class TaskReads:
    def __init__(self, store: Store) -> None:
        self._store = store
        self.redact = store.redact  # the secret values no shown agent text may hold

    async def chosen_locale(self, user_id: int) -> str | None:
        """The user's /lang choice; None: they made none."""
        return (await self._store.users.locales()).get(user_id)

    async def own(self, user_id: int, task_id: int) -> Task | None:
        task = await self._store.tasks.get(task_id)
        return task if task is not None and task.owner_id == user_id else None

    async def rows(self, user_id: int, archived: bool, limit: int) -> list[TaskRow]:
        """The user's newest ``limit`` tasks, newest first; archived ones only when asked for."""
        statuses = None if archived else [s for s in TaskStatus if s is not TaskStatus.ARCHIVED]
        found = await self._store.tasks.list_for(user_id, statuses, limit)
        waits = await self._store.waits.of(found)
        ids = [t.id for t in found]
        trees = await self._store.worktrees.states_of(ids)
        ran = await self._store.ran.models(ids)
        hosts = await self._store.ran.hosts(ids)
        return [
            TaskRow(t, waits.get(t.id), trees.get(t.id), ran.get(t.id), hosts.get(t.id))
            for t in found
        ]

    async def page(self, user_id: int, task_id: int) -> TaskPage | None:
        """The page of the user's task as it is now; None: not theirs, or gone."""
        task = await self.own(user_id, task_id)
        if task is None:
            return None
        turns = await self._store.tasks.turns_of(task.id, limit=TURNS_SHOWN)
        checks = []
        for turn in turns:
            check = await self._store.checks.for_turn(turn.id)
            if check is not None:
                checks.append((turn.seq, check))
        waits = await self._store.waits.of([task])
        ran = await self._store.ran.models([task.id])
        return TaskPage(
            task,
            waits.get(task.id),
            ran.get(task.id),
            tuple(turns),
            tuple(checks),
            tuple(await self._store.questions.pending_of([task.id])),
            await self._store.prs.get(task.id),
            (await self._store.ran.hosts([task.id])).get(task.id),
        )

    async def lines(
        self, user_id: int, task_id: int, cursor: int, limit: int
    ) -> list[TranscriptLine]:
        """At most ``limit`` of the user's task's transcript lines after ``cursor`` (a line
        id; 0: from the start), oldest first; none: not theirs."""
        return await self._store.transcript.after(task_id, cursor, limit, owner_id=user_id)

    async def question(
        self, user_id: int, task_id: int, question_id: int
    ) -> PendingQuestion | None:
        """A question of the user's task; None: another task's, or gone."""
        found = await self._store.questions.get(question_id)
        if found is None or found.task_id != task_id or await self.own(user_id, task_id) is None:
            return None
        return found

    async def mark(self) -> object:
        """A value that differs after any change a page shows (``PulseRepo.mark``)."""
        return await self._store.pulse.mark()
