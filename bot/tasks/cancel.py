"""Cancelling a task, the one way every door does (the chat's /cancel and Cancel button, the
board, `detach mcp`): its queued turns dropped and its running turn stopped (here at once, or by
the process that runs it), or, when none had started, the task cancelled now."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from bot.errors import TaskStateError
from bot.fleet.takeover import Takeover
from bot.models import Task, TaskStatus
from bot.store import Store
from bot.tasks.lineage import MAX_DEPTH
from bot.tasks.lookup import TaskLookup
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts


@dataclass(frozen=True, slots=True)
class Cancelled:
    """``task`` as it was asked, ``now`` after; ``stopping``: its running turn is being
    stopped; ``dropped``: its queued turns dropped."""

    task: Task
    now: Task
    stopping: bool
    dropped: int


class Cancellation:
    def __init__(
        self,
        *,
        lookup: TaskLookup,
        store: Store,
        notifier: Notifier,
        texts: Texts,
        stop_here: Callable[[int], bool] = lambda _task_id: False,
        takeover: Takeover | None = None,
    ) -> None:
        """``stop_here``: stops the task's turn if this process runs it (``JobPool.cancel``;
        else its runner is asked to, through the store); ``takeover``: on a shared database,
        cancels at once a task whose runner is gone."""
        self._lookup = lookup
        self._store = store
        self._notifier = notifier
        self._texts = texts
        self._stop_here = stop_here
        self._takeover = takeover

    async def cancel(
        self, user_id: int, task_id: int, reply_to: int | None = None, detail: str = ""
    ) -> Cancelled:
        """Drop the task's queued turns and stop its running one; ``TaskStateError`` when it
        has neither. ``reply_to``: the ``/cancel`` message, answered in the task's chat with one
        message that ends true: "cancelling…" while the turn stops, which its card then
        replaces, or "cancelled" at once. ``detail``: the audit line's (an MCP client). Its
        sub-tasks, and theirs, are cancelled first (a tree stops as one)."""
        task = await self._lookup.get_own(user_id, task_id)
        below = await self._cancel_below(user_id, task.id, MAX_DEPTH)
        try:
            return await self._cancel_one(user_id, task, reply_to, detail)
        except TaskStateError:
            if not below:
                raise
            return Cancelled(task, await self._lookup.get_own(user_id, task.id), False, 0)

    async def _cancel_below(self, user_id: int, task_id: int, levels: int) -> int:
        """The task's active sub-tasks, deepest first, cancelled: how many."""
        count = 0
        for child in await self._store.tasks.children(task_id) if levels > 0 else ():
            count += await self._cancel_below(user_id, child.id, levels - 1)
            if child.status.active:
                with contextlib.suppress(TaskStateError):  # it ended meanwhile
                    await self._cancel_one(user_id, child, None, f"with its parent #{task_id}")
                    count += 1
        return count

    async def _cancel_one(
        self, user_id: int, task: Task, reply_to: int | None, detail: str
    ) -> Cancelled:
        """One task's queued turns dropped and its running one stopped."""
        async with self._store.atomic():  # the turn's card, which takes the reply over, waits
            dropped = await self._store.tasks.cancel_queued(task.id)
            stopping = self._stop_here(task.id) or await self._store.claims.request_stop(task.id)
            now = await self._lookup.get_own(user_id, task.id)
            stopping = stopping and now.status is TaskStatus.RUNNING  # else it had ended
            if not stopping and not dropped:
                raise TaskStateError(
                    "error.not_active",
                    label=task.label,
                    status=self._texts.status(task.locale, now.status),
                )
            if stopping and reply_to is not None:
                await self._notifier.cancelling(task, reply_to)
            if stopping and self._takeover is not None:
                await self._takeover.if_lost(task.id)  # its runner is gone: cancelled now
            if not stopping:
                now = await self._cancelled(user_id, now, dropped, reply_to)
            await self._store.audit.record("task_cancelled", user_id, task.id, detail)
        return Cancelled(task, now, stopping, dropped)

    async def _cancelled(
        self, user_id: int, task: Task, dropped: int, reply_to: int | None
    ) -> Task:
        """A task that had not started (or waited for a limit) is cancelled now."""
        await self._store.tasks.set_status(
            task.id,
            TaskStatus.CANCELLED,
            only_from=[TaskStatus.QUEUED, TaskStatus.WAITING_FOR_LIMIT],
        )
        now = await self._lookup.get_own(user_id, task.id)
        await self._notifier.ack_status(now)
        await self._notifier.buttons_follow(now)
        if reply_to is not None:
            await self._notifier.cancelled_queued(now, dropped, reply_to)
        return now
