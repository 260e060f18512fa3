"""What fires schedules: the process's APScheduler (``bot.turns.scheduler``, in memory, the
one that runs the turns' jobs too), of its task ``detach-schedule``. The schedules table is the
record; every active schedule is registered again at start and the app catches up what was
missed (``ScheduleDesk.start``), so nothing here is persisted. A fired schedule starts a task
like any other, whose turn runs wherever turns run."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Self

from bot.turns.scheduler import JobScheduler

if TYPE_CHECKING:
    from apscheduler import AsyncScheduler
    from apscheduler.abc import Trigger

log = logging.getLogger(__name__)
SCHEDULE_TASK = "detach-schedule"
ScheduleHandler = Callable[[int], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class When:
    """When a schedule fires: a crontab line in a time zone, or one moment."""

    cron: str | None = None
    at: datetime | None = None
    tz: str = "UTC"

    def trigger(self, start: datetime | None = None) -> Trigger:
        from apscheduler.triggers.cron import CronTrigger
        from apscheduler.triggers.date import DateTrigger

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


class ScheduleTimer:
    """Call ``serve`` with the handler of a schedule that fires before entering; enter it
    after the process's scheduler and leave it before (a schedule that fires once the timer
    is left does nothing: registered again at the next start)."""

    def __init__(self, scheduler: JobScheduler) -> None:
        self._jobs = scheduler
        self._on_fire: ScheduleHandler | None = None
        self._configured = False
        self._open = False

    def serve(self, on_fire: ScheduleHandler) -> Self:
        self._on_fire = on_fire
        return self

    async def __aenter__(self) -> Self:
        assert self._on_fire is not None, "serve() names the handler before the timer starts"
        self._open = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._open = False

    async def _started(self) -> AsyncScheduler:
        assert self._open, "timer not started"
        scheduler = await self._jobs.started()
        if not self._configured:  # schedules fire side by side: no limit of running jobs
            await scheduler.configure_task(SCHEDULE_TASK, func=self._fire, max_running_jobs=None)
            self._configured = True
        return scheduler

    async def _fire(self, schedule_id: int) -> None:
        assert self._on_fire is not None
        if self._open:
            await self._on_fire(schedule_id)

    async def set(self, schedule_id: int, when: When) -> None:
        """(Re)register a schedule from the app's table; it fires from now on. Missed runs are
        the app's to catch up (it knows when a schedule last ran), so the engine never adds a
        second catch-up run of its own."""
        from apscheduler import CoalescePolicy, ConflictPolicy

        scheduler = await self._started()
        await scheduler.add_schedule(
            SCHEDULE_TASK,
            when.trigger(),
            id=f"schedule-{schedule_id}",
            kwargs={"schedule_id": schedule_id},
            conflict_policy=ConflictPolicy.replace,
            coalesce=CoalescePolicy.latest,
            misfire_grace_time=None,
        )

    async def remove(self, schedule_id: int) -> None:
        if not self._configured:
            return  # none was ever set
        from apscheduler import ScheduleLookupError

        scheduler = await self._jobs.started()
        with contextlib.suppress(ScheduleLookupError):  # already gone (a one-off that fired)
            await scheduler.remove_schedule(f"schedule-{schedule_id}")
