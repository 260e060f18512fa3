"""The usage windows of engines' plans as the engines last reported them (Claude's five-hour
and weekly windows), and whether the owner was warned about each window already."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from bot.store.db import Clock, Database, aware, upsert
from bot.store.schema import engine_windows

# two reports of one window name the same reset, give or take the API's rounding
SAME_WINDOW = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class UsageWindow:
    """One window of an engine's plan: ``used`` 0..1 (None: not said), its reset (None: not
    said), when it was reported."""

    engine: str
    window: str
    used: float | None
    resets_at: datetime | None
    updated_at: datetime


class EngineWindowRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def report(
        self,
        engine: str,
        window: str,
        used: float | None,
        resets_at: datetime | None,
        warn_at: float,
    ) -> bool:
        """Store the latest report of a window; True when this report is the first of that
        window (the same reset) at or past ``warn_at`` (0..1): the caller warns, once, whichever
        task and process reports it (every new Claude process reports its windows again)."""
        key = {"engine": engine, "window": window}
        where = sa.and_(*(engine_windows.c[k] == v for k, v in key.items()))
        query = sa.select(engine_windows.c.warned, engine_windows.c.warned_reset).where(where)
        async with self._engine.begin() as conn:
            row = (await conn.execute(query.with_for_update())).first()
            known = row is not None and row.warned and _same(aware(row.warned_reset), resets_at)
            over = resets_at is not None and resets_at <= self._clock()  # reset already
            warn = used is not None and used >= warn_at and not known and not over
            values = {"used": used, "resets_at": resets_at, "updated_at": self._clock()}
            if warn:
                values |= {"warned": True, "warned_reset": resets_at}
            await upsert(conn, engine_windows, key, values)
        return warn

    async def all(self) -> list[UsageWindow]:
        """Every window reported, by engine and window; one whose reset has passed is left out
        (what it said is over)."""
        now = self._clock()
        query = sa.select(engine_windows).order_by(engine_windows.c.engine, engine_windows.c.window)
        async with self._engine.connect() as conn:
            rows = list(await conn.execute(query))
        found = [
            UsageWindow(r.engine, r.window, r.used, aware(r.resets_at), aware(r.updated_at) or now)
            for r in rows
        ]
        return [w for w in found if w.resets_at is None or w.resets_at > now]


def _same(warned: datetime | None, resets_at: datetime | None) -> bool:
    """The window warned about is this one: no reset named either time, or the new reset is
    not after the old one (beyond the API's rounding)."""
    if warned is None or resets_at is None:
        return True
    return resets_at <= warned + SAME_WINDOW
