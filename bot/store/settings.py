"""What a chat and a user chose: a chat's preset, directory and notification policy, a user's
language and time zone."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from bot.store.db import Clock, Database, upsert
from bot.store.schema import chat_settings, user_settings


@dataclass(frozen=True, slots=True)
class ChatSettings:
    """A chat's stored choices (None: never chosen)."""

    preset: str | None = None
    cwd: str | None = None
    notify: str | None = None
    host: str | None = None  # new tasks pinned to it ("" or None: any host)


class ChatSettingsRepo:
    """A chat's choices. On SQLite they are read once per chat and kept: the bot is the only
    process that writes them (scale-out runners need PostgreSQL; the shell writes tasks, never
    a chat's choices), and every write goes through here, so this copy is forgotten as it
    commits. That saves a store round trip on every message's way to its agent. On
    PostgreSQL, which several processes share, each read goes to the database."""

    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock
        self._kept: dict[int, ChatSettings] | None = {} if engine.one_writer else None
        self._writes = 0  # a read begun before a write keeps nothing (it may be stale)

    async def get(self, chat_id: int) -> ChatSettings:
        """All of a chat's choices in one read (a new task needs its preset and directory)."""
        kept = self._kept
        if kept is not None and (settings := kept.get(chat_id)) is not None:
            return settings
        writes, shared = self._writes, not self._engine.in_transaction
        async with self._engine.connect() as conn:
            row = (await conn.execute(_chat_settings(), {"chat_id": chat_id})).first()
        settings = (
            ChatSettings(row.preset, row.cwd, row.notify, row.host) if row else ChatSettings()
        )
        # read in a transaction: maybe its own uncommitted write, kept only once committed
        if kept is not None and shared and writes == self._writes:
            kept[chat_id] = settings
        return settings

    async def preset(self, chat_id: int) -> str | None:
        return (await self.get(chat_id)).preset

    async def set_preset(self, chat_id: int, preset: str) -> None:
        await self._set(chat_id, preset=preset)

    async def cwd(self, chat_id: int) -> str | None:
        return (await self.get(chat_id)).cwd

    async def set_cwd(self, chat_id: int, cwd: str) -> None:
        await self._set(chat_id, cwd=cwd)

    async def set_host(self, chat_id: int, host: str | None) -> None:
        await self._set(chat_id, host=host or "")

    async def notify(self, chat_id: int) -> str | None:
        return (await self.get(chat_id)).notify

    async def set_notify(self, chat_id: int, policy: str) -> None:
        await self._set(chat_id, notify=policy)

    async def _set(self, chat_id: int, **values: str) -> None:
        self._forget(chat_id)
        await _choose(self._engine, chat_settings, {"chat_id": chat_id}, values, self._clock())
        self._engine.after_commit(lambda: self._forget(chat_id))

    def _forget(self, chat_id: int) -> None:
        self._writes += 1
        if self._kept is not None:
            self._kept.pop(chat_id, None)


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
        await _choose(self._engine, user_settings, {"user_id": user_id}, values, self._clock())


async def _choose(
    engine: Database, table: sa.Table, key: dict[str, int], values: dict[str, str], now: datetime
) -> None:
    """Store what a chat or user chose (the row made on their first choice)."""
    async with engine.begin() as conn:
        await upsert(conn, table, key, {**values, "updated_at": now})


# read on the path from a message to its agent, built once (it took longer to build than
# SQLite takes to run it)
@functools.cache
def _chat_settings() -> sa.Select[Any]:
    """A chat's choices (parameter: chat_id)."""
    c = chat_settings.c
    query = sa.select(c.preset, c.cwd, c.notify, c.host)
    return query.where(chat_settings.c.chat_id == sa.bindparam("chat_id"))
