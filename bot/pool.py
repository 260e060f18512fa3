"""The job pool: APScheduler 4 behind one module (the only one importing apscheduler).

It adds what APScheduler lacks: cancel of a running turn by task id (an in-process registry of
asyncio tasks), a per-turn timeout, and the reason a turn was stopped, handed to the turn handler.
The app's tables stay the record of truth; a turn claims its row before it starts, so a job that
the engine runs twice does nothing the second time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Self

from apscheduler import AsyncScheduler, TaskDefaults
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore

from bot.store.db import make_engine

log = logging.getLogger(__name__)


class StopReason(StrEnum):
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"


@dataclass(slots=True)
class TurnControl:
    """Handed to the turn handler: why it was stopped, if the pool stopped it."""

    task_id: int
    turn_id: int
    reason: StopReason | None = None
    _job: asyncio.Task[None] | None = field(default=None, repr=False)


TurnHandler = Callable[[int, TurnControl], Awaitable[None]]

# pool identity -> running pool; the job function must be importable by module path.
_POOLS: dict[str, JobPool] = {}
TURN_TASK_ID = "bot.pool:run_turn_job"


async def run_turn_job(pool_id: str, task_id: int, turn_id: int) -> None:
    """The APScheduler task: one agent turn."""
    pool = _POOLS.get(pool_id)
    if pool is None:
        log.warning("turn %s: no pool %s in this process; skipped", turn_id, pool_id)
        return
    await pool.run(task_id, turn_id)


class JobPool:
    def __init__(self, jobs_url: str, identity: str, max_concurrent: int, timeout_s: float,
                 handler: TurnHandler) -> None:
        self._url = jobs_url
        self.identity = identity
        self._max_concurrent = max_concurrent
        self._timeout_s = timeout_s
        self._handler = handler
        self._running: dict[int, TurnControl] = {}
        self._scheduler: AsyncScheduler | None = None

    async def __aenter__(self) -> Self:
        store = SQLAlchemyDataStore(make_engine(self._url))
        # APScheduler's default of one running job per task would serialise every turn; the cap
        # is max_concurrent_jobs. add_job by task id, since add_job(callable) re-applies defaults.
        self._scheduler = AsyncScheduler(store, identity=self.identity,
                                         max_concurrent_jobs=self._max_concurrent,
                                         task_defaults=TaskDefaults(max_running_jobs=None))
        await self._scheduler.__aenter__()
        await self._scheduler.configure_task(TURN_TASK_ID, func=run_turn_job,
                                             max_running_jobs=None)
        _POOLS[self.identity] = self
        await self._scheduler.start_in_background()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        _POOLS.pop(self.identity, None)
        if self._scheduler is not None:
            await self._scheduler.__aexit__(None, None, None)

    async def submit(self, task_id: int, turn_id: int) -> None:
        assert self._scheduler is not None, "pool not started"
        await self._scheduler.add_job(TURN_TASK_ID, kwargs={
            "pool_id": self.identity, "task_id": task_id, "turn_id": turn_id})
        log.info("task %s turn %s submitted", task_id, turn_id)

    def is_running(self, task_id: int) -> bool:
        return task_id in self._running

    def cancel(self, task_id: int, reason: StopReason = StopReason.CANCELLED) -> bool:
        """Stop the turn of ``task_id`` running in this process; False if none runs here."""
        control = self._running.get(task_id)
        if control is None or control._job is None:
            return False
        control.reason = control.reason or reason
        control._job.cancel()
        return True

    async def run(self, task_id: int, turn_id: int) -> None:
        control = TurnControl(task_id, turn_id, _job=asyncio.current_task())
        self._running[task_id] = control
        timer = asyncio.get_running_loop().call_later(
            self._timeout_s, self.cancel, task_id, StopReason.TIMED_OUT)
        try:
            await self._handler(turn_id, control)
        except asyncio.CancelledError:
            if control.reason is None:
                raise  # shutdown: the turn is left for recovery at the next start
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        finally:
            timer.cancel()
            if self._running.get(task_id) is control:
                del self._running[task_id]
