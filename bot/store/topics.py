"""Forum topics the bot opened (a topic per task, or per working directory), and the topic
each task's messages go to."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from bot.models import TaskStatus
from bot.store.db import DEFERRED, Clock, Database, insert_missing
from bot.store.schema import forum_topics, task_topics, tasks


@dataclass(frozen=True, slots=True)
class Topic:
    chat_id: int
    key: str
    thread_id: int | None  # None: the topic is gone; messages go to the chat itself
    name: str
    closed: bool


class TopicRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def key_of(self, task_id: int) -> tuple[bool, str | None]:
        """(placed, key): whether the task's place is decided, and its topic's key (None:
        the chat itself)."""
        query = sa.select(task_topics.c.key).where(task_topics.c.task_id == task_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return (False, None) if row is None else (True, row.key)

    async def placed_in_topics(self, task_ids: Sequence[int]) -> list[int]:
        """Those of ``task_ids`` whose messages go to a topic (one query)."""
        query = sa.select(task_topics.c.task_id).where(
            task_topics.c.task_id.in_(task_ids), task_topics.c.key.is_not(None)
        )
        async with self._engine.connect() as conn:
            return sorted(int(r[0]) for r in await conn.execute(query))

    async def place(self, task_id: int, chat_id: int, key: str | None) -> None:
        """The task's messages go to topic ``key`` from now on (None: the chat itself)."""
        async with self._engine.begin() as conn:  # one trip: the commit's
            await conn.execute(
                task_topics.delete().where(task_topics.c.task_id == task_id),
                execution_options=DEFERRED,
            )
            await conn.execute(
                task_topics.insert().values(task_id=task_id, chat_id=chat_id, key=key),
                execution_options=DEFERRED,
            )

    async def get(self, chat_id: int, key: str) -> Topic | None:
        query = sa.select(forum_topics).where(
            forum_topics.c.chat_id == chat_id, forum_topics.c.key == key
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        if row is None:
            return None
        return Topic(row.chat_id, row.key, row.thread_id, row.name, bool(row.closed))

    async def opened(self, chat_id: int, key: str, thread_id: int, name: str) -> None:
        """Telegram opened topic ``thread_id`` for ``key`` (replacing a closed or gone one)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                forum_topics.delete().where(
                    forum_topics.c.chat_id == chat_id, forum_topics.c.key == key
                )
            )
            await conn.execute(
                *insert_missing(
                    forum_topics,
                    {"chat_id": chat_id, "key": key},
                    {
                        "thread_id": thread_id,
                        "name": name,
                        "closed": False,
                        "created_at": self._clock(),
                    },
                )
            )

    async def closed(self, chat_id: int, key: str) -> None:
        await self._set(chat_id, key, closed=True)

    async def gone(self, chat_id: int, thread_id: int) -> None:
        """Telegram no longer knows the topic (deleted): its tasks' messages go to the chat."""
        statement = (
            forum_topics.update()
            .where(forum_topics.c.chat_id == chat_id, forum_topics.c.thread_id == thread_id)
            .values(thread_id=None)
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def _set(self, chat_id: int, key: str, **values: object) -> None:
        statement = (
            forum_topics.update()
            .where(forum_topics.c.chat_id == chat_id, forum_topics.c.key == key)
            .values(**values)
        )
        async with self._engine.begin() as conn:
            await conn.execute(statement)

    async def tasks_in(self, chat_id: int, thread_id: int) -> list[int]:
        """The tasks whose messages go to topic ``thread_id`` of the chat, newest first."""
        query = (
            sa.select(task_topics.c.task_id)
            .join(
                forum_topics,
                sa.and_(
                    forum_topics.c.chat_id == task_topics.c.chat_id,
                    forum_topics.c.key == task_topics.c.key,
                ),
            )
            .where(forum_topics.c.chat_id == chat_id, forum_topics.c.thread_id == thread_id)
            .order_by(task_topics.c.task_id.desc())
        )
        async with self._engine.connect() as conn:
            return [int(r) for r in (await conn.execute(query)).scalars()]

    async def open_tasks(self, chat_id: int, key: str) -> int:
        """How many tasks of topic ``key`` are not archived (a shared topic stays open)."""
        query = (
            sa.select(sa.func.count())
            .select_from(task_topics.join(tasks, tasks.c.id == task_topics.c.task_id))
            .where(
                task_topics.c.chat_id == chat_id,
                task_topics.c.key == key,
                tasks.c.status != TaskStatus.ARCHIVED,
            )
        )
        async with self._engine.connect() as conn:
            return int((await conn.execute(query)).scalar() or 0)
