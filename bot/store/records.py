"""Append-only records: message links, spend and audit rows."""

from __future__ import annotations

import functools
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from bot.models import SpendLine
from bot.store.db import DEFERRED, Clock, Database, insert_missing, inserting
from bot.store.schema import audit, message_links, spend


class LinkRepo:
    """Telegram (chat, message) -> task, so a reply to any message of a task reaches it."""

    def __init__(self, engine: Database) -> None:
        self._engine = engine

    async def link(self, chat_id: int, message_id: int, task_id: int, kind: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                *insert_missing(
                    message_links,
                    {"chat_id": chat_id, "message_id": message_id},
                    {"task_id": task_id, "kind": kind},
                ),
                execution_options=DEFERRED,
            )

    async def task_for(self, chat_id: int, message_id: int) -> int | None:
        async with self._engine.connect() as conn:
            return (
                await conn.execute(_linked_task(), {"chat_id": chat_id, "message_id": message_id})
            ).scalar()


class SpendRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def record(
        self,
        user_id: int,
        task_id: int,
        turn_id: int,
        cost_usd: float,
        input_tokens: int,
        output_tokens: int,
        *,
        engine: str | None = None,
        model: str | None = None,
        unpriced: bool = False,
    ) -> None:
        now = self._clock()
        async with self._engine.begin() as conn:
            await conn.execute(
                inserting(spend),
                {
                    "user_id": user_id,
                    "day": now.date().isoformat(),
                    "task_id": task_id,
                    "turn_id": turn_id,
                    "cost_usd": cost_usd,
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "created_at": now,
                    "engine": engine,
                    "model": model,
                    "unpriced": unpriced,
                },
                execution_options=DEFERRED,
            )

    async def by_model(self, user_id: int, since_day: str) -> list[SpendLine]:
        """Tokens and cost per engine and model since ``since_day``, the engine's name first."""
        query = (
            sa.select(
                spend.c.engine,
                spend.c.model,
                spend.c.unpriced,
                sa.func.sum(spend.c.input_tokens),
                sa.func.sum(spend.c.output_tokens),
                sa.func.sum(spend.c.cost_usd),
            )
            .where(spend.c.user_id == user_id, spend.c.day >= since_day)
            .group_by(spend.c.engine, spend.c.model, spend.c.unpriced)
        )
        async with self._engine.connect() as conn:
            rows = list(await conn.execute(query))
        lines = [
            SpendLine(engine or "?", model, bool(unpriced), int(i or 0), int(o or 0), float(c or 0))
            for engine, model, unpriced, i, o, c in rows
        ]
        return sorted(lines, key=lambda line: (line.engine, line.model or ""))

    async def unpriced_before(self, user_id: int, model: str | None, turn_id: int) -> bool:
        """Whether a turn of this user before ``turn_id`` was already counted as unpriced for
        ``model`` (its notice was said then)."""
        query = sa.select(spend.c.id).where(
            spend.c.user_id == user_id,
            spend.c.unpriced.is_(True),
            spend.c.turn_id < turn_id,
            spend.c.model.is_(None) if model is None else spend.c.model == model,
        )
        async with self._engine.connect() as conn:
            return (await conn.execute(query.limit(1))).first() is not None

    async def day_total(self, user_id: int, day: str) -> float:
        async with self._engine.connect() as conn:
            return float(
                (await conn.execute(_day_total(), {"user_id": user_id, "day": day})).scalar_one()
            )

    async def by_day(self, user_id: int, since_day: str) -> dict[str, float]:
        query = (
            sa.select(spend.c.day, sa.func.sum(spend.c.cost_usd))
            .where(spend.c.user_id == user_id, spend.c.day >= since_day)
            .group_by(spend.c.day)
        )
        async with self._engine.connect() as conn:
            return {day: float(total) for day, total in await conn.execute(query)}

    def today(self) -> str:
        return self._clock().date().isoformat()


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audit row as its owner reads it back."""

    id: int
    at: datetime
    action: str
    task_id: int | None
    detail: str


class AuditRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def record(
        self, action: str, user_id: int | None, task_id: int | None = None, detail: str = ""
    ) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                inserting(audit),
                {
                    "at": self._clock(),
                    "user_id": user_id,
                    "action": action,
                    "task_id": task_id,
                    "detail": detail[:2000],
                },
                execution_options=DEFERRED,
            )

    async def of_user(
        self,
        user_id: int,
        actions: Collection[str],
        offset: int = 0,
        limit: int = 10,
        task_id: int | None = None,
    ) -> list[AuditEntry]:
        """``user_id``'s own rows of ``actions`` (of one task, with ``task_id``), newest first."""
        query = sa.select(audit).where(audit.c.user_id == user_id, audit.c.action.in_(actions))
        if task_id is not None:
            query = query.where(audit.c.task_id == task_id)
        query = query.order_by(audit.c.id.desc()).offset(offset).limit(limit)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [AuditEntry(r.id, r.at, r.action, r.task_id, r.detail) for r in rows]

    async def count(self, action: str, user_id: int | None = None) -> int:
        query = sa.select(sa.func.count()).where(audit.c.action == action)
        if user_id is not None:
            query = query.where(audit.c.user_id == user_id)
        async with self._engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())


# The reads on the path from a message to its agent, built once (each took longer to build than
# SQLite takes to run it).
@functools.cache
def _linked_task() -> sa.Select[Any]:
    """The task a message belongs to (parameters: chat_id, message_id)."""
    return sa.select(message_links.c.task_id).where(
        message_links.c.chat_id == sa.bindparam("chat_id"),
        message_links.c.message_id == sa.bindparam("message_id"),
    )


@functools.cache
def _day_total() -> sa.Select[Any]:
    """What a user spent on a day (parameters: user_id, day), read before each task when a
    daily cap is set."""
    return sa.select(sa.func.coalesce(sa.func.sum(spend.c.cost_usd), 0.0)).where(
        spend.c.user_id == sa.bindparam("user_id"), spend.c.day == sa.bindparam("day")
    )
