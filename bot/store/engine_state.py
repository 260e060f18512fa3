"""What the store keeps for engines: the conversations of engines that keep their own, and the
usage limits engines reached."""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from bot.store.db import Clock, Database, aware, upsert
from bot.store.schema import engine_limits, engine_sessions

# No plan's usage window is longer (Claude's weekly limit is the longest): a reset further ahead
# than this is a clock or a parser gone wrong, and believing it would hold every task of the
# engine behind it.
LIMIT_HORIZON = timedelta(days=7)


class EngineSessionRepo:
    """The SessionStore of engines that keep their own conversations (bot/ports.py)."""

    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def load(self, session_id: str) -> list[dict[str, Any]] | None:
        query = sa.select(engine_sessions.c.messages).where(
            engine_sessions.c.session_id == session_id
        )
        async with self._engine.connect() as conn:
            stored = (await conn.execute(query)).scalar()
        return json.loads(stored) if stored is not None else None

    async def save(self, session_id: str, engine: str, messages: list[dict[str, Any]]) -> None:
        values = {"engine": engine, "messages": json.dumps(messages), "updated_at": self._clock()}
        async with self._engine.begin() as conn:
            await upsert(conn, engine_sessions, {"session_id": session_id}, values)


class EngineLimitRepo:
    """Engines whose usage limit is reached, until when (shared by all processes)."""

    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def extend(self, engine: str, until: datetime) -> datetime:
        """``engine`` is limited until ``until``, or until the limit in force when that is
        later: a limit only moves later while it holds (one task's answer never shortens what
        the other tasks of the engine wait for). Returns the limit now stored."""
        until = until.astimezone(UTC)  # every time we store is UTC (SQLite keeps no zone)
        async with self._engine.begin() as conn:
            stored = aware((await conn.execute(_engine_limit(), {"engine": engine})).scalar())
            if stored is not None and stored > until:
                return stored  # in force and later (a past one is never later: until is ahead)
            values = {"until": until, "updated_at": self._clock()}
            await upsert(conn, engine_limits, {"engine": engine}, values)
        return until

    async def active(self) -> dict[str, datetime]:
        """Engines still limited now, and until when (a few rows: compared here, in UTC). A
        limit further ahead than LIMIT_HORIZON is none (stored before such times were
        refused)."""
        now = self._clock()
        async with self._engine.connect() as conn:
            rows = list(await conn.execute(_engine_limits()))
        found: dict[str, datetime] = {}
        for row in rows:
            until = aware(row.until)
            if until is not None and now < until <= now + LIMIT_HORIZON:
                found[row.engine] = until
        return found


# read before every turn, built once
@functools.cache
def _engine_limits() -> sa.Select[Any]:
    return sa.select(engine_limits.c.engine, engine_limits.c.until)


@functools.cache
def _engine_limit() -> sa.Select[Any]:
    """One engine's limit, its row locked to the transaction's end (PostgreSQL: two runners
    extending it take turns; SQLite has one writer anyway)."""
    where = engine_limits.c.engine == sa.bindparam("engine")
    return sa.select(engine_limits.c.until).where(where).with_for_update()
