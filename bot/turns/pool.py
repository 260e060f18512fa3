"""The job pool: APScheduler 4 behind one module (the only one importing apscheduler).

It adds what APScheduler lacks: cancel of a running turn by task id (an in-process registry of
asyncio tasks), a per-turn timeout, and the reason a turn was stopped, handed to the turn handler.
The app's tables stay the record of truth; a turn claims its row before it starts, so a job that
the engine runs twice does nothing the second time.

Turns go through APScheduler's job store only when workers share it (PostgreSQL). In one process
its in-memory store adds nothing the app's tables do not already give (queued turns are
re-submitted from them at start) but a scheduler round trip of about 4 ms before every agent
starts, so there turns wait in a local FIFO under the same cap; schedules always use APScheduler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Self

from apscheduler import (
    AsyncScheduler,
    CoalescePolicy,
    ConflictPolicy,
    ScheduleLookupError,
    SchedulerRole,
    TaskDefaults,
)
from apscheduler.abc import DataStore, EventBroker, Trigger
from apscheduler.datastores.memory import MemoryDataStore
from apscheduler.datastores.sqlalchemy import SQLAlchemyDataStore
from apscheduler.eventbrokers.local import LocalEventBroker
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger

from bot.models import ProcessRole
from bot.store.db import make_engine

log = logging.getLogger(__name__)


class StopReason(StrEnum):
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    SHUTDOWN = "shutdown"  # the turn is left for recovery at the next start


class Phase(StrEnum):
    STARTING = "starting"  # claiming its row: a stop is remembered, applied on entering RUNNING
    RUNNING = "running"  # the agent runs: a stop cancels it at once
    FINISHING = "finishing"  # writing the outcome: too late to stop


@dataclass(slots=True)
class TurnControl:
    """Handed to the turn handler: why it was stopped, and which part of it may be stopped."""

    task_id: int
    turn_id: int
    reason: StopReason | None = None
    phase: Phase = Phase.STARTING
    _job: asyncio.Task[None] | None = field(default=None, repr=False)

    def request_stop(self, reason: StopReason) -> bool:
        if self.phase is Phase.FINISHING:
            return False
        self.reason = self.reason or reason
        if self.phase is Phase.RUNNING and self._job is not None:
            self._job.cancel()
        return True

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The stoppable part of a turn; a stop requested while starting applies here."""
        if self.reason is not None:
            raise asyncio.CancelledError
        self.phase = Phase.RUNNING
        try:
            yield
        finally:
            self.phase = Phase.FINISHING


TurnHandler = Callable[[int, TurnControl], Awaitable[None]]
ScheduleHandler = Callable[[int], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class When:
    """When a schedule fires: a crontab line in a time zone, or one moment."""

    cron: str | None = None
    at: datetime | None = None
    tz: str = "UTC"

    def trigger(self, start: datetime | None = None) -> Trigger:
        if self.cron is not None:
            return CronTrigger.from_crontab(self.cron, timezone=self.tz, start_time=start)
        assert self.at is not None
        return DateTrigger(self.at)

    def next_after(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after`` (None when a one-off is past)."""
        if self.cron is None:
            return self.at if self.at is not None and self.at > after else None
        trigger = self.trigger(after)
        fire = trigger.next()
        while fire is not None and fire <= after:
            fire = trigger.next()
        return fire

    def check(self, now: datetime) -> None:
        """ValueError when the crontab line or the zone is not valid, or it never fires."""
        try:
            self.trigger()
        except (LookupError, TypeError) as exc:  # APScheduler's parser on e.g. weekday 8
            raise ValueError(str(exc) or type(exc).__name__) from exc
        if self.cron is not None and self.next_after(now) is None:
            raise ValueError("it never fires")


_SCHEDULER_ROLES = {
    ProcessRole.ALL: SchedulerRole.both,
    ProcessRole.FRONT: SchedulerRole.scheduler,
    ProcessRole.WORKER: SchedulerRole.worker,
}

# pool identity -> running pool; the job function must be importable by module path.
_POOLS: dict[str, JobPool] = {}
TURN_TASK_ID = "bot.turns.pool:run_turn_job"
SCHEDULE_TASK_ID = "bot.turns.pool:fire_schedule_job"
JOBS_SCHEMA = "apscheduler"
DRAIN_TIMEOUT_S = 20.0


def _local_pool(pool_id: str) -> JobPool | None:
    """The pool that submitted the job, or this process's one pool: with scale-out workers the
    job runs in another process than the one that added it."""
    pool = _POOLS.get(pool_id)
    if pool is None and len(_POOLS) == 1:
        pool = next(iter(_POOLS.values()))
    return pool


async def run_turn_job(pool_id: str, task_id: int, turn_id: int) -> None:
    """The APScheduler task: one agent turn."""
    pool = _local_pool(pool_id)
    if pool is None:
        log.warning("turn %s: no pool %s in this process; skipped", turn_id, pool_id)
        return
    await pool.run(task_id, turn_id)


async def fire_schedule_job(pool_id: str, schedule_id: int) -> None:
    """The APScheduler task of every schedule: start that schedule's run."""
    pool = _local_pool(pool_id)
    if pool is None or pool.on_schedule is None:
        log.warning("schedule %s: no pool %s in this process; skipped", schedule_id, pool_id)
        return
    await pool.on_schedule(schedule_id)


class JobPool:
    def __init__(
        self,
        jobs_url: str | None,
        identity: str,
        max_concurrent: int,
        timeout_s: float,
        role: ProcessRole = ProcessRole.ALL,
    ) -> None:
        """Call ``serve`` with the handlers before entering the pool."""
        self._url = jobs_url
        self._role = _SCHEDULER_ROLES[role]
        self.identity = identity
        self._max_concurrent = max_concurrent
        self._timeout_s = timeout_s
        self._handler: TurnHandler | None = None
        self._running: dict[int, TurnControl] = {}  # by turn id: one registration per turn
        self._again: set[int] = set()  # turns submitted again while they ran here
        self._scheduler: AsyncScheduler | None = None
        self.on_schedule: ScheduleHandler | None = None
        self._waiting: deque[tuple[int, int]] = deque()  # one process: turns waiting for a slot
        self._local: set[asyncio.Task[None]] = set()  # one process: the turns' jobs

    def serve(self, on_turn: TurnHandler, on_schedule: ScheduleHandler | None = None) -> Self:
        """The handlers of this pool's jobs: a turn, and a schedule that fires."""
        self._handler, self.on_schedule = on_turn, on_schedule
        return self

    async def __aenter__(self) -> Self:
        assert self._handler is not None, "serve() names the handlers before the pool starts"
        store: DataStore = MemoryDataStore()
        broker: EventBroker = LocalEventBroker()
        if self._url is not None:
            engine = make_engine(self._url)
            store = SQLAlchemyDataStore(engine)
            if engine.dialect.driver == "asyncpg":  # shared with workers, woken by NOTIFY
                # its own schema: its "tasks" and "schedules" tables are not the app's
                store = SQLAlchemyDataStore(engine, schema=JOBS_SCHEMA)
                from apscheduler.eventbrokers.asyncpg import AsyncpgEventBroker

                broker = AsyncpgEventBroker.from_async_sqla_engine(engine)
        # APScheduler's default of one running job per task would serialise every turn; the cap
        # is max_concurrent_jobs. add_job by task id, since add_job(callable) re-applies defaults.
        self._scheduler = AsyncScheduler(
            store,
            broker,
            role=self._role,
            identity=self.identity,
            max_concurrent_jobs=self._max_concurrent,
            task_defaults=TaskDefaults(max_running_jobs=None),
        )
        await self._scheduler.__aenter__()
        await self._scheduler.configure_task(TURN_TASK_ID, func=run_turn_job, max_running_jobs=None)
        await self._scheduler.configure_task(
            SCHEDULE_TASK_ID, func=fire_schedule_job, max_running_jobs=None
        )
        _POOLS[self.identity] = self
        await self._scheduler.start_in_background()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._waiting.clear()  # still queued in the app's tables: submitted again at start
        await self._drain()
        for job in list(self._local):  # only a turn that did not stop within the drain
            job.cancel()
        if self._local:
            await asyncio.wait(self._local, timeout=DRAIN_TIMEOUT_S)
        _POOLS.pop(self.identity, None)
        if self._scheduler is not None:
            await self._scheduler.__aexit__(None, None, None)

    async def _drain(self) -> None:
        """Stop our own turns first, with one plain cancel each: APScheduler's stop cancels
        through anyio scopes that re-cancel every await, which would cut the turns' final
        database writes (and their agents' clean stop) short."""
        for control in list(self._running.values()):
            control.request_stop(StopReason.SHUTDOWN)
        deadline = asyncio.get_running_loop().time() + DRAIN_TIMEOUT_S
        while self._running and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        if self._running:
            log.warning("turns %s did not stop within %ss", sorted(self._running), DRAIN_TIMEOUT_S)

    async def submit(self, task_id: int, turn_id: int) -> None:
        assert self._scheduler is not None, "pool not started"
        if self._url is None:
            self._waiting.append((task_id, turn_id))
            self._start_waiting()
        else:
            await self._scheduler.add_job(
                TURN_TASK_ID,
                kwargs={"pool_id": self.identity, "task_id": task_id, "turn_id": turn_id},
            )
        log.info("task %s turn %s submitted", task_id, turn_id)

    def _start_waiting(self) -> None:
        """One process: start waiting turns, oldest first, while the cap allows."""
        while self._waiting and len(self._local) < self._max_concurrent:
            task_id, turn_id = self._waiting.popleft()
            job = asyncio.create_task(self._local_job(task_id, turn_id))
            self._local.add(job)
            job.add_done_callback(self._local_done)

    async def _local_job(self, task_id: int, turn_id: int) -> None:
        try:
            await self.run(task_id, turn_id)
        except Exception:  # as APScheduler does with a failed job: say it, go on
            log.exception("task %s turn %s: the turn's job failed", task_id, turn_id)

    def _local_done(self, job: asyncio.Task[None]) -> None:
        self._local.discard(job)
        self._start_waiting()

    async def set_schedule(self, schedule_id: int, when: When) -> None:
        """(Re)register a schedule from the app's table; it fires from now on. Missed runs are
        the app's to catch up (it knows when a schedule last ran), so the engine never adds a
        second catch-up run of its own."""
        assert self._scheduler is not None, "pool not started"
        await self._scheduler.add_schedule(
            SCHEDULE_TASK_ID,
            when.trigger(),
            id=f"schedule-{schedule_id}",
            kwargs={"pool_id": self.identity, "schedule_id": schedule_id},
            conflict_policy=ConflictPolicy.replace,
            coalesce=CoalescePolicy.latest,
            misfire_grace_time=None,
        )

    async def remove_schedule(self, schedule_id: int) -> None:
        assert self._scheduler is not None, "pool not started"
        with contextlib.suppress(ScheduleLookupError):  # already gone (a one-off that fired)
            await self._scheduler.remove_schedule(f"schedule-{schedule_id}")

    def is_running(self, task_id: int) -> bool:
        return any(c.task_id == task_id for c in self._running.values())

    def cancel(self, task_id: int, reason: StopReason = StopReason.CANCELLED) -> bool:
        """Stop the turns of ``task_id`` running in this process; False if none runs here."""
        stopped = [
            c.request_stop(reason) for c in list(self._running.values()) if c.task_id == task_id
        ]
        return any(stopped)

    async def run(self, task_id: int, turn_id: int) -> None:
        """Run one turn under its timeout. A second job of a turn already running here (it was
        submitted twice, or again after that run sent it back to the queue: a usage limit)
        returns at once and leaves the first one's registration alone, so the timeout and
        /cancel keep holding the turn that runs; the first job then offers the turn to its
        handler once more (whose claim does nothing if the turn is no longer queued)."""
        if turn_id in self._running:
            self._again.add(turn_id)
            log.info("task %s turn %s: runs here; offered again after that run", task_id, turn_id)
            return
        while True:
            await self._run_once(task_id, turn_id)
            if turn_id not in self._again:
                return
            self._again.discard(turn_id)

    async def _run_once(self, task_id: int, turn_id: int) -> None:
        control = TurnControl(task_id, turn_id, _job=asyncio.current_task())
        self._running[turn_id] = control
        timer = asyncio.get_running_loop().call_later(
            self._timeout_s, control.request_stop, StopReason.TIMED_OUT
        )
        handler = self._handler
        assert handler is not None, "serve() named no turn handler"
        try:
            await handler(turn_id, control)
        except asyncio.CancelledError:
            if control.reason is None:
                raise  # APScheduler itself cancelled the job
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        finally:
            timer.cancel()
            del self._running[turn_id]
