"""What the store keeps for engines: the conversations of engines that keep their own, and the
usage limits engines reached."""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from bot.store.db import Clock, Database, aware, upsert
from bot.store.schema import engine_limits, engine_sessions


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

    async def set(self, engine: str, until: datetime) -> None:
        values = {"until": until, "updated_at": self._clock()}
        async with self._engine.begin() as conn:
            await upsert(conn, engine_limits, {"engine": engine}, values)

    async def active(self) -> dict[str, datetime]:
        """Engines still limited now, and until when (a few rows: compared here, in UTC)."""
        now = self._clock()
        async with self._engine.connect() as conn:
            rows = list(await conn.execute(_engine_limits()))
        found: dict[str, datetime] = {}
        for row in rows:
            until = aware(row.until)
            if until is not None and until > now:
                found[row.engine] = until
        return found


# read before every turn, built once
@functools.cache
def _engine_limits() -> sa.Select[Any]:
    return sa.select(engine_limits.c.engine, engine_limits.c.until)
