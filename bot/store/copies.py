"""The copies that /pending showed of what waits on an owner (``pending_copies``): an open
question or a preflight hold. The newest one per chat and a few in all stay live; each is
edited with the original when it settles."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from bot.models import CopyOf
from bot.store.db import Database
from bot.store.schema import pending_copies, pending_questions, preflight_holds

COPIES_KEPT = 5  # the live copies of one question, across the owner's chats
_SUBJECTS = {CopyOf.QUESTION: pending_questions, CopyOf.HOLD: preflight_holds}


@dataclass(frozen=True, slots=True)
class PendingCopy:
    """A copy's chat and outbox row (the message it became is edited through the row)."""

    chat_id: int
    row_id: int


class PendingCopyRepo:
    def __init__(self, engine: Database) -> None:
        self._engine = engine

    async def add(
        self, of: CopyOf, subject_id: int, copy: PendingCopy, keep: int = COPIES_KEPT
    ) -> list[PendingCopy]:
        """Record ``copy`` of the question or hold and retire (return, and forget) the copies
        it replaces: an older one in the same chat, and the oldest past ``keep``. One
        transaction, ordered by the subject's row lock (PostgreSQL) or the one writer (SQLite),
        so two /pending at once leave exactly one copy per chat."""
        mine = sa.and_(pending_copies.c.of == of.value, pending_copies.c.subject_id == subject_id)
        async with self._engine.begin() as conn:
            if not self._engine.one_writer:
                subject = _SUBJECTS[of]
                lock = sa.select(subject.c.id).where(subject.c.id == subject_id)
                await conn.execute(lock.with_for_update())
            await conn.execute(
                pending_copies.insert().values(
                    of=of.value, subject_id=subject_id, chat_id=copy.chat_id, row_id=copy.row_id
                )
            )
            query = sa.select(pending_copies).where(mine).order_by(pending_copies.c.id.desc())
            retired = _retired(list(await conn.execute(query)), keep)
            if retired:
                gone = pending_copies.c.id.in_([r.id for r in retired])
                await conn.execute(pending_copies.delete().where(gone))
        return [PendingCopy(r.chat_id, r.row_id) for r in retired]

    async def of(self, of: CopyOf, subject_id: int) -> list[PendingCopy]:
        """The live copies of the question or hold, oldest first."""
        query = (
            sa.select(pending_copies.c.chat_id, pending_copies.c.row_id)
            .where(pending_copies.c.of == of.value, pending_copies.c.subject_id == subject_id)
            .order_by(pending_copies.c.id)
        )
        async with self._engine.connect() as conn:
            return [PendingCopy(r.chat_id, r.row_id) for r in await conn.execute(query)]


def _retired(newest_first: list[sa.Row[tuple[object, ...]]], keep: int) -> list[sa.Row]:  # type: ignore[type-arg]
    """The copies past the newest one of each chat and past the newest ``keep``."""
    chats: set[int] = set()
    retired = []
    for row in newest_first:
        if row.chat_id in chats or len(chats) >= keep:
            retired.append(row)
        else:
            chats.add(row.chat_id)
    return retired
