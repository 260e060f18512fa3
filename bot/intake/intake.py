"""Work that arrives outside Telegram updates: tasks added from a shell or dropped into the
inbox."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from bot.intake.inbox import Inbox
from bot.models import Task
from bot.store import Store
from bot.telegram.notifier import Notifier
from bot.turns.queue import TurnQueue

log = logging.getLogger(__name__)


ALIVE_EVERY_S = 5.0  # how often the bot's heartbeat file is touched


class Intake:
    """Polls the store for work written by other processes (`detach add`, `detach mcp`): new
    tasks and turns to start, stops and steers to apply; and touches ``alive`` (the heartbeat those
    processes read to tell whether the bot runs)."""

    def __init__(
        self,
        *,
        store: Store,
        queue: TurnQueue,
        notifier: Notifier,
        interval_s: float,
        inbox: Inbox | None = None,
        alive: Path | None = None,
        steers: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``steers``: carries out the steers `detach mcp` asked for (``SteerDesk``)."""
        self._inbox = inbox
        self._steers = steers
        self._store = store
        self._queue = queue
        self._notifier = notifier
        self._interval_s = interval_s
        self._alive = alive
        self._touched = float("-inf")

    async def run_forever(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception:  # a bad poll must not end intake; the next one retries
                log.exception("intake poll failed")
            await asyncio.sleep(self._interval_s)

    async def poll_once(self) -> None:
        self._beat()
        fresh = await self._store.tasks.unannounced()
        await self._queue.kick_unsubmitted()
        for task_id in await self._store.claims.stops_requested():
            self._queue.stop(task_id)
        if self._steers is not None:
            await self._steers()
        for task in fresh:
            async with self._store.atomic():  # announced once, with its acknowledgement
                await self._store.tasks.set_announced(task.id)
                await self._announce(task)
            log.info("task %s picked up from the shell", task.id)
        if self._inbox is not None:
            await self._inbox.poll_once()

    async def _announce(self, task: Task) -> None:
        """A queued task's acknowledgement; a finished one (a session ``detach adopt`` made a
        task) gets its card."""
        last = None if task.status.active else await self._store.tasks.last_turn(task.id)
        if last is None:
            await self._notifier.acknowledge(task)
        else:
            await self._notifier.turn_finished(task, last)

    def _beat(self) -> None:
        if self._alive is None or time.monotonic() - self._touched < ALIVE_EVERY_S:
            return
        self._alive.parent.mkdir(parents=True, exist_ok=True)
        self._alive.touch()
        self._touched = time.monotonic()
