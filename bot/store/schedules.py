"""Rows of schedules: /every (a crontab line) and /at (one time), in the owner's time zone."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa

from bot.models import ScheduleState
from bot.rows import Schedule
from bot.store.db import Clock, Database, aware
from bot.store.schema import schedules

ACTIVE, PAUSED, DONE, DELETED = (
    ScheduleState.ACTIVE,
    ScheduleState.PAUSED,
    ScheduleState.DONE,
    ScheduleState.DELETED,
)


def _row(r: sa.Row) -> Schedule:  # type: ignore[type-arg]
    created = aware(r.created_at)
    assert created is not None
    return Schedule(
        r.id,
        r.owner_id,
        r.chat_id,
        r.cron,
        aware(r.run_at),
        r.tz,
        r.text,
        r.locale,
        r.state,
        aware(r.last_run_at),
        r.runs,
        created,
    )


class ScheduleRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def add(
        self,
        owner_id: int,
        chat_id: int,
        cron: str | None,
        run_at: datetime | None,
        tz: str,
        text: str,
        locale: str,
    ) -> Schedule:
        async with self._engine.begin() as conn:
            result = await conn.execute(
                schedules.insert().values(
                    owner_id=owner_id,
                    chat_id=chat_id,
                    cron=cron,
                    tz=tz,
                    text=text,
                    run_at=run_at.astimezone(UTC) if run_at else None,  # stored as UTC
                    locale=locale,
                    state=ACTIVE,
                    created_at=self._clock(),
                )
            )
            schedule_id = int(result.inserted_primary_key[0])  # type: ignore[index]
        found = await self.get(schedule_id)
        assert found is not None
        return found

    async def get(self, schedule_id: int) -> Schedule | None:
        async with self._engine.connect() as conn:
            r = (
                await conn.execute(schedules.select().where(schedules.c.id == schedule_id))
            ).first()
        return _row(r) if r else None

    async def list_for(self, owner_id: int | None, states: tuple[str, ...]) -> list[Schedule]:
        query = schedules.select().where(schedules.c.state.in_(states)).order_by(schedules.c.id)
        if owner_id is not None:
            query = query.where(schedules.c.owner_id == owner_id)
        async with self._engine.connect() as conn:
            return [_row(r) for r in await conn.execute(query)]

    async def set_state(self, schedule_id: int, state: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(schedules).where(schedules.c.id == schedule_id).values(state=state)
            )

    async def ran(self, schedule_id: int, at: datetime, done: bool) -> None:
        values: dict[str, object] = {"last_run_at": at, "runs": schedules.c.runs + 1}
        if done:
            values["state"] = DONE
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(schedules).where(schedules.c.id == schedule_id).values(**values)
            )

    async def skip_to(self, schedule_id: int, at: datetime) -> None:
        """Count slots up to ``at`` as passed (a resumed schedule does not catch up)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(schedules).where(schedules.c.id == schedule_id).values(last_run_at=at)
            )
