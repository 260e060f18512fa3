"""This process's one APScheduler (4.0.0a6): it runs both the turns' jobs (``bot.turns.pool``)
and the schedules' timers (``bot.schedules.timer``). Its data store is in memory
(``MemoryDataStore``, ``LocalEventBroker``): the app's tables are the record of truth and the
queue between machines (turns are claimed from them, schedules registered again from them at
start), so nothing here is persisted. APScheduler's PostgreSQL store is not used: it deadlocked
when a worker restarted (``bench/apscheduler_deadlock.py``).

APScheduler is imported and started by ``start`` (the bot once its first ``getUpdates`` is out,
a worker at start), or by its first use (a turn to run, a schedule to set) when that comes
sooner: ~85 ms of imports and ~3 MB here, anyio included, that the bot's first ``getUpdates``
does not wait for (``import bot.app``, ``import bot.worker`` load none of it).
It runs in a task of its own that enters and leaves it: its anyio scopes must be left by the
task that entered them, and the first use may come from any task."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import TYPE_CHECKING, Self

if TYPE_CHECKING:
    from apscheduler import AsyncScheduler

log = logging.getLogger(__name__)
STOP_WAIT_S = 10.0
# A job's lease guards a store shared between schedulers; this one is not shared, and a lapsed
# lease would hand a running turn's job out a second time. A day is beyond any stall of the
# loop (running jobs' leases are renewed every half of it).
LEASE = timedelta(days=1)


class JobScheduler:
    """Enter it in the process's composition root, before what uses it (the pool, the timer):
    leaving it stops APScheduler, which cancels any job still running. Each user configures
    its own APScheduler task (its callable, its ``max_running_jobs``); the scheduler-wide limit
    stays APScheduler's 100, above any pool's cap (``max_concurrent_turns`` ≤ 64)."""

    def __init__(self) -> None:
        self._scheduler: AsyncScheduler | None = None
        self._holder: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._starting = asyncio.Lock()
        self._open = False

    async def __aenter__(self) -> Self:
        self._open = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._open = False
        if self._holder is not None:
            self._stop.set()
            done, _ = await asyncio.wait({self._holder}, timeout=STOP_WAIT_S)
            if not done:
                log.warning("APScheduler did not stop within %ss", STOP_WAIT_S)
        self._scheduler = self._holder = None

    @property
    def running(self) -> bool:
        """APScheduler was started (and not left)."""
        return self._scheduler is not None

    async def start(self) -> None:
        """Import and start APScheduler now, not on first use."""
        await self.started()

    async def started(self) -> AsyncScheduler:
        """APScheduler, running (started on the first call). RuntimeError once left."""
        if not self._open:
            raise RuntimeError("the job scheduler is not open")
        async with self._starting:
            if self._scheduler is None:
                ready: asyncio.Future[AsyncScheduler] = asyncio.get_running_loop().create_future()
                self._holder = asyncio.create_task(self._hold(ready), name="scheduler")
                self._scheduler = await ready
        return self._scheduler

    async def _hold(self, ready: asyncio.Future[AsyncScheduler]) -> None:
        from apscheduler import AsyncScheduler, TaskDefaults
        from apscheduler.datastores.memory import MemoryDataStore
        from apscheduler.eventbrokers.local import LocalEventBroker

        try:
            async with AsyncScheduler(
                MemoryDataStore(),
                LocalEventBroker(),
                task_defaults=TaskDefaults(max_running_jobs=None),  # each task sets its own
                lease_duration=LEASE,
            ) as scheduler:
                await scheduler.start_in_background()
                ready.set_result(scheduler)
                await self._stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise
