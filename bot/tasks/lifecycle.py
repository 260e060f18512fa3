"""What ends or takes up a task again from the chat: /cancel, /archive, Resume / Mark failed on
a task a restart interrupted, and Run elsewhere for one whose host is offline."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from bot.errors import TaskStateError
from bot.models import MessageKind, Task, TaskStatus
from bot.money.desk import MoneyDesk
from bot.store import Store
from bot.tasks.cancel import Cancellation
from bot.tasks.lookup import TaskLookup, parse_task_id
from bot.tasks.nextturn import NextTurns
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)
ARCHIVE_FOLLOW_MAX = 20  # cards edited by one /archive all (each edit is a paced call)


class TaskLifecycle:
    def __init__(
        self,
        *,
        lookup: TaskLookup,
        turns: NextTurns,
        money: MoneyDesk,
        cancellation: Cancellation,
        store: Store,
        notifier: Notifier,
        texts: Texts,
    ) -> None:
        self._lookup = lookup
        self._turns = turns
        self._money = money
        self._cancellation = cancellation
        self._store = store
        self._notifier = notifier
        self._texts = texts

    async def cancel(self, user_id: int, task_id: int, reply_to: int | None = None) -> Task:
        """``Cancellation.cancel``: the task as it was asked."""
        return (await self._cancellation.cancel(user_id, task_id, reply_to)).task

    async def archive(
        self, user_id: int, ref: str, announce: Callable[[int], Awaitable[object]] | None = None
    ) -> int:
        """Archive the idle task ``ref`` (``12``, ``#12``), or ``all`` finished ones in one
        statement, in one transaction with all that tells of it: ``announce(count)`` first (the
        answer the owner waits for goes out before the cards' edits), then the tasks' topics
        closed and the cards of the newest ``ARCHIVE_FOLLOW_MAX`` updated in one batch (older
        cards' buttons answer that the task is archived)."""
        one = None if ref == "all" else parse_task_id(ref, "archive")
        async with self._store.atomic():
            if one is None:
                archived, newest = await self._store.tasks.archive_all(user_id, ARCHIVE_FOLLOW_MAX)
            else:
                task = await self._lookup.get_idle(user_id, one)
                await self._store.tasks.set_status(task.id, TaskStatus.ARCHIVED)
                newest = [await self._lookup.get_own(user_id, task.id)]
                archived = [(task.id, task.chat_id)]
            if announce is not None:
                await announce(len(archived))
            await self._notifier.archived(archived, newest)
            await self._store.audit.record("archived", user_id, None, ref)
        return len(archived)

    async def resume_interrupted(self, user_id: int, task_id: int) -> Task:
        task = await self._interrupted(user_id, task_id)
        await self._money.check_daily_cap(user_id)
        last = await self._store.tasks.last_turn(task.id)
        preamble = self._texts.get(task.locale, "task.interrupted_preamble")
        await self._turns.queue(
            task,
            user_id,
            f"{preamble}\n\n{last.prompt if last else ''}",
            "resumed",
            lambda turn: self._notifier.turn_note(
                task, turn.id, "task.resumed", "task.resume_state"
            ),
        )
        return task

    async def run_elsewhere(self, user_id: int, task_id: int, fresh: bool = False) -> bool:
        """Run elsewhere (its host is offline): the owner's queued task loses its host pin;
        ``fresh``: its session too (it lives on a host that is gone). False: not queued."""
        task = await self._lookup.get_own(user_id, task_id)
        if not await self._store.tasks.unpin(task.id, fresh):
            return False
        await self._store.audit.record("unpinned", user_id, task.id, "fresh" if fresh else "")
        await self._store.claims.announce()  # the hosts that fit look now
        log.info("task %s: unpinned by its owner (fresh session: %s)", task.id, fresh)
        return True

    async def mark_failed(self, user_id: int, task_id: int) -> Task:
        task = await self._interrupted(user_id, task_id)
        await self._store.tasks.set_status(
            task.id, TaskStatus.FAILED, only_from=[TaskStatus.INTERRUPTED]
        )
        await self._store.audit.record("marked_failed", user_id, task.id)
        line = self._texts.get(task.locale, "task.marked_failed", label=task.label)
        await self._notifier.send(task, line, kind=MessageKind.STATUS)
        now = await self._lookup.get_own(user_id, task.id)
        await self._notifier.ack_status(now)
        await self._notifier.buttons_follow(now)
        return task

    async def _interrupted(self, user_id: int, task_id: int) -> Task:
        task = await self._lookup.get_own(user_id, task_id)
        if task.status is not TaskStatus.INTERRUPTED:
            raise TaskStateError(
                "error.not_interrupted",
                label=task.label,
                status=self._texts.status(task.locale, task.status),
            )
        return task
