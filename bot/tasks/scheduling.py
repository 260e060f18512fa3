"""The record of /every and /at schedules and of the user's time zone (/tz): what a schedule is,
whose it is, its state, its runs, and the audit of each change. ``bot.schedules.desk`` keeps the
timer and the translation of the user's words; this is what it reads and writes."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from bot.errors import UserInputError
from bot.models import ScheduleState
from bot.rows import Schedule
from bot.store import Store
from bot.store.db import utcnow

ACTIVE, PAUSED, DELETED = ScheduleState.ACTIVE, ScheduleState.PAUSED, ScheduleState.DELETED


class ScheduleBook:
    def __init__(self, store: Store, clock: Callable[[], datetime] = utcnow) -> None:
        self._store = store
        self._clock = clock

    async def tz(self, user_id: int) -> str | None:
        """The user's time zone (/tz); None: they set none."""
        return await self._store.users.tz(user_id)

    async def set_tz(self, user_id: int, key: str) -> None:
        await self._store.users.set_tz(user_id, key)

    async def add(
        self,
        user_id: int,
        chat_id: int,
        when: tuple[str | None, datetime | None],
        tz: str,
        text: str,
        locale: str,
    ) -> Schedule:
        """A new active schedule: ``when`` is its crontab line, or the one time it runs."""
        cron, at = when
        schedule = await self._store.schedules.add(user_id, chat_id, cron, at, tz, text, locale)
        await self._store.audit.record("schedule_added", user_id, None, f"S{schedule.id}")
        return schedule

    async def listed(self, user_id: int) -> list[Schedule]:
        """The user's active and paused schedules, oldest first."""
        return await self._store.schedules.list_for(user_id, (ACTIVE, PAUSED))

    async def active(self) -> list[Schedule]:
        """Every user's active schedules (what the timer runs)."""
        return await self._store.schedules.list_for(None, (ACTIVE,))

    async def get(self, schedule_id: int) -> Schedule | None:
        return await self._store.schedules.get(schedule_id)

    async def own(self, user_id: int, schedule_id: int) -> Schedule:
        """A schedule of this user, not deleted; somebody else's is reported as missing."""
        schedule = await self._store.schedules.get(schedule_id)
        if schedule is None or schedule.owner_id != user_id or schedule.state == DELETED:
            raise UserInputError("schedule.not_found", ref=f"S{schedule_id}")
        return schedule

    async def pause(self, schedule: Schedule) -> None:
        await self._store.schedules.set_state(schedule.id, PAUSED)

    async def resume(self, schedule: Schedule) -> None:
        """Runs missed while paused are not caught up: it goes on from now."""
        await self._store.schedules.skip_to(schedule.id, self._clock())
        await self._store.schedules.set_state(schedule.id, ACTIVE)

    async def delete(self, schedule: Schedule) -> None:
        await self._store.schedules.set_state(schedule.id, DELETED)
        ref = f"S{schedule.id}"
        await self._store.audit.record("schedule_deleted", schedule.owner_id, None, ref)

    async def ran(self, schedule: Schedule, at: datetime) -> None:
        """A run of ``schedule`` began ``at``; a one-time schedule is then done."""
        await self._store.schedules.ran(schedule.id, at, done=schedule.cron is None)

    async def started(self, schedule: Schedule, task_id: int | None) -> None:
        """Its run started ``task_id``; None: its preflight holds it for the owner."""
        ref, owner = f"S{schedule.id}", schedule.owner_id
        if task_id is None:
            await self._store.audit.record("schedule_held", owner, None, ref)
        else:
            await self._store.audit.record("schedule_run", owner, task_id, ref)
