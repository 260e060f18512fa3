"""Append-only records: transcript events, message links, spend and audit rows."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa

from bot.store.db import Clock, Database, aware, insert_missing, inserting, upsert, utc
from bot.store.schema import (
    audit,
    chat_settings,
    engine_limits,
    engine_sessions,
    message_links,
    spend,
    transcript,
    user_settings,
)


class Writer(Protocol):
    def write(self, text: str, /) -> int: ...


@dataclass(frozen=True, slots=True)
class TranscriptLine:
    line: int
    turn_id: int
    kind: str
    body: dict[str, Any]
    created_at: datetime


class TranscriptRepo:
    """Events are appended in batches and read back as a tail; never loaded whole."""

    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def append(
        self, task_id: int, turn_id: int, events: list[tuple[str, dict[str, Any]]]
    ) -> None:
        if not events:
            return
        now = self._clock()
        rows = [
            dict(
                task_id=task_id,
                turn_id=turn_id,
                kind=kind,
                created_at=now,
                body=json.dumps(body, ensure_ascii=False, default=str),  # times as ISO text
            )
            for kind, body in events
        ]
        async with self._engine.begin() as conn:
            await conn.execute(inserting(transcript), rows)

    async def count(self, task_id: int) -> int:
        async with self._engine.connect() as conn:
            return int(
                (
                    await conn.execute(
                        sa.select(sa.func.count()).where(transcript.c.task_id == task_id)
                    )
                ).scalar_one()
            )

    async def write_all(
        self,
        task_id: int,
        out: Writer,
        render: Callable[[str, dict[str, Any]], str | None],
        batch: int = 500,
    ) -> None:
        """The whole transcript into ``out``, one ``render``ed line per event (None: skipped),
        read in batches."""
        last_id = 0
        while events := await self.after(task_id, last_id, batch):
            for event in events:
                line = render(event.kind, event.body)
                if line is not None:
                    out.write(f"{event.created_at:%H:%M:%S} {line}\n")
            last_id = events[-1].line

    async def after(self, task_id: int, cursor: int, limit: int = 200) -> list[TranscriptLine]:
        """A task's events newer than ``cursor`` (an event id; 0: from the start), oldest
        first, at most ``limit``."""
        query = (
            transcript.select()
            .where(transcript.c.task_id == task_id, transcript.c.id > cursor)
            .order_by(transcript.c.id)
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [_line(r) for r in await conn.execute(query)]

    async def tail(self, task_id: int, limit: int = 50) -> list[TranscriptLine]:
        query = (
            transcript.select()
            .where(transcript.c.task_id == task_id)
            .order_by(transcript.c.id.desc())
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = list(await conn.execute(query))
        return [_line(r) for r in reversed(rows)]


def _line(row: Any) -> TranscriptLine:
    return TranscriptLine(row.id, row.turn_id, row.kind, json.loads(row.body), utc(row.created_at))


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
                )
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
                },
            )

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
class ChatSettings:
    """A chat's stored choices (None: never chosen)."""

    preset: str | None = None
    cwd: str | None = None
    notify: str | None = None


class ChatSettingsRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def get(self, chat_id: int) -> ChatSettings:
        """All of a chat's choices in one read (a new task needs its preset and directory)."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(_chat_settings(), {"chat_id": chat_id})).first()
        return ChatSettings(row.preset, row.cwd, row.notify) if row else ChatSettings()

    async def preset(self, chat_id: int) -> str | None:
        return (await self.get(chat_id)).preset

    async def set_preset(self, chat_id: int, preset: str) -> None:
        await self._set(chat_id, preset=preset)

    async def cwd(self, chat_id: int) -> str | None:
        return (await self.get(chat_id)).cwd

    async def set_cwd(self, chat_id: int, cwd: str) -> None:
        await self._set(chat_id, cwd=cwd)

    async def notify(self, chat_id: int) -> str | None:
        return (await self.get(chat_id)).notify

    async def set_notify(self, chat_id: int, policy: str) -> None:
        await self._set(chat_id, notify=policy)

    async def _set(self, chat_id: int, **values: str) -> None:
        async with self._engine.begin() as conn:
            key, now = {"chat_id": chat_id}, self._clock()
            await upsert(conn, chat_settings, key, {**values, "updated_at": now})


class UserSettingsRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def locales(self) -> dict[int, str]:
        async with self._engine.connect() as conn:
            return {
                uid: loc
                for uid, loc in await conn.execute(
                    sa.select(user_settings.c.user_id, user_settings.c.locale)
                )
                if loc
            }

    async def set_locale(self, user_id: int, locale: str) -> None:
        await self._set(user_id, locale=locale)

    async def tz(self, user_id: int) -> str | None:
        async with self._engine.connect() as conn:
            return (
                await conn.execute(
                    sa.select(user_settings.c.tz).where(user_settings.c.user_id == user_id)
                )
            ).scalar()

    async def set_tz(self, user_id: int, tz: str) -> None:
        await self._set(user_id, tz=tz)

    async def _set(self, user_id: int, **values: str) -> None:
        async with self._engine.begin() as conn:
            key, now = {"user_id": user_id}, self._clock()
            await upsert(conn, user_settings, key, {**values, "updated_at": now})


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
            )

    async def count(self, action: str, user_id: int | None = None) -> int:
        query = sa.select(sa.func.count()).where(audit.c.action == action)
        if user_id is not None:
            query = query.where(audit.c.user_id == user_id)
        async with self._engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())


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


# The reads on the path from a message to its agent, built once (each took longer to build than
# SQLite takes to run it).
@functools.cache
def _chat_settings() -> sa.Select[Any]:
    """A chat's choices (parameter: chat_id)."""
    query = sa.select(chat_settings.c.preset, chat_settings.c.cwd, chat_settings.c.notify)
    return query.where(chat_settings.c.chat_id == sa.bindparam("chat_id"))


@functools.cache
def _linked_task() -> sa.Select[Any]:
    """The task a message belongs to (parameters: chat_id, message_id)."""
    return sa.select(message_links.c.task_id).where(
        message_links.c.chat_id == sa.bindparam("chat_id"),
        message_links.c.message_id == sa.bindparam("message_id"),
    )


@functools.cache
def _engine_limits() -> sa.Select[Any]:
    return sa.select(engine_limits.c.engine, engine_limits.c.until)


@functools.cache
def _day_total() -> sa.Select[Any]:
    """What a user spent on a day (parameters: user_id, day), read before each task when a
    daily cap is set."""
    return sa.select(sa.func.coalesce(sa.func.sum(spend.c.cost_usd), 0.0)).where(
        spend.c.user_id == sa.bindparam("user_id"), spend.c.day == sa.bindparam("day")
    )
