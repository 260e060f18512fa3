"""Tasks written by other processes (`detach add`, `detach mcp`, `detach adopt`): which arrived
and are not announced yet, and which stops were asked for. Each new task is announced once, in
the transaction that marks it announced: a queued one gets its acknowledgement, a finished one
(an adopted session) its card."""

from __future__ import annotations

from bot.models import Task
from bot.store import Store
from bot.telegram.notifier import Notifier


class Arrivals:
    def __init__(self, store: Store, notifier: Notifier) -> None:
        self._store = store
        self._notifier = notifier

    async def unannounced(self) -> list[Task]:
        return await self._store.tasks.unannounced()

    async def stops(self) -> list[int]:
        """The tasks another process asked to stop."""
        return await self._store.claims.stops_requested()

    async def announce(self, task: Task) -> None:
        async with self._store.atomic():
            await self._store.tasks.set_announced(task.id)
            last = None if task.status.active else await self._store.tasks.last_turn(task.id)
            if last is None:
                await self._notifier.acknowledge(task)
            else:
                await self._notifier.turn_finished(task, last)
