"""The update journal: Telegram updates stored before their receipt is confirmed, removed once
handled, so an update whose handling a crash cut short is handled again at the next start."""

from __future__ import annotations

import functools

import sqlalchemy as sa

from bot.store.db import DEFERRED, Clock, Database, insert_missing
from bot.store.schema import update_journal


class UpdateJournalRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def keep(self, update_id: int, payload: str) -> None:
        """Store an update (again is fine: Telegram re-sends what was not confirmed)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                *insert_missing(
                    update_journal,
                    {"update_id": update_id},
                    {"payload": payload, "received_at": self._clock()},
                ),
                execution_options=DEFERRED,
            )

    async def done(self, update_id: int) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(_forget(), {"update_id": update_id}, execution_options=DEFERRED)

    async def pending(self) -> list[tuple[int, str]]:
        """Updates kept but never handled, oldest first."""
        query = sa.select(update_journal.c.update_id, update_journal.c.payload).order_by(
            update_journal.c.update_id
        )
        async with self._engine.connect() as conn:
            return [(r[0], r[1]) for r in await conn.execute(query)]


@functools.cache
def _forget() -> sa.Delete:
    """Remove a handled update (parameter: update_id): once per update, built once."""
    return update_journal.delete().where(update_journal.c.update_id == sa.bindparam("update_id"))
