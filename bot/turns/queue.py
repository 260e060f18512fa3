"""One turn per task at a time: submit a task's oldest queued turn when none of its turns runs."""

from __future__ import annotations

import logging

from bot.store import Store
from bot.turns.pool import JobPool

log = logging.getLogger(__name__)


class TurnQueue:
    def __init__(self, store: Store, pool: JobPool) -> None:
        self._store = store
        self._pool = pool

    async def kick(self, task_id: int) -> None:
        """Submit the next turn of ``task_id`` if it may start now. Idempotent: whoever asks
        (the command, the intake's periodic kick, a finished turn), one job per turn; marking
        the row submitted is the atomic gate, and the pool ignores a job of a turn it runs."""
        turn = await self._store.tasks.next_queued_turn(task_id)
        if turn is None or not await self._store.tasks.mark_submitted(turn.id):
            return
        await self._pool.submit(task_id, turn.id)

    async def submit(self, task_id: int, turn_id: int) -> None:
        """Submit a turn its creator marked submitted (a new task's first: nothing to wait for)."""
        await self._pool.submit(task_id, turn_id)

    async def kick_unsubmitted(self) -> int:
        """Submit queued turns that nobody has submitted yet (added by `detach add`, or left
        queued by a restart)."""
        task_ids = await self._store.tasks.unsubmitted_task_ids()
        for task_id in task_ids:
            await self.kick(task_id)
        return len(task_ids)
