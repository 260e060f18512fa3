"""What the store forgets: the bytes of delivered files, delivered outbox rows and the
transcripts of archived tasks past the retention. Each call does a bounded batch (``limit``
rows) in one short transaction, so a caller can spread the work and never holds the writer
(SQLite has one: the bot's other writes and `detach add` wait for it) for long."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from bot.models import OutboxOp, OutboxStatus, TaskStatus
from bot.store.db import Clock, Database
from bot.store.schema import outbox, preflight_holds, tasks, transcript

DELIVERED = [OutboxStatus.SENT, OutboxStatus.FAILED, OutboxStatus.SUPERSEDED]
_WITH_BYTES = '{"data": "_%'  # a document row's payload starts with its base64 bytes
_STRIPPED = '{"data": "",%'


def _without_bytes(payload: str) -> str:
    """A document row's payload with its base64 bytes (which hold no quote) cut out: the
    same JSON with ``"data": ""``, without parsing the bytes."""
    end = payload.index('"', len(_WITH_BYTES) - 2)
    return _STRIPPED[:-2] + payload[end + 1 :]


class RetentionRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def strip_delivered_files(self, limit: int) -> int:
        """Drop the bytes of up to ``limit`` files already delivered (or given up on): nothing
        reads them again; the row (its caption, file name and buttons) stays."""
        query = (
            sa.select(outbox.c.id, outbox.c.payload)
            .where(
                outbox.c.op == OutboxOp.DOCUMENT,
                outbox.c.status.in_(DELIVERED),
                outbox.c.payload.like(_WITH_BYTES),
                outbox.c.payload.not_like(_STRIPPED),
            )
            .order_by(outbox.c.id)
            .limit(limit)
        )
        async with self._engine.begin() as conn:
            rows = list(await conn.execute(query))
            if rows:
                await conn.execute(
                    outbox.update()
                    .where(outbox.c.id == sa.bindparam("row_id"))
                    .values(payload=sa.bindparam("stripped")),
                    [{"row_id": i, "stripped": _without_bytes(p)} for i, p in rows],
                )
        return len(rows)

    async def delete_delivered(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` outbox rows delivered (or given up on) before ``before``;
        rows still to send are never touched."""
        old = (
            sa.select(outbox.c.id)
            .where(outbox.c.status.in_(DELIVERED), outbox.c.created_at < before)
            .order_by(outbox.c.id)
            .limit(limit)
        )
        return await self._delete(outbox, old)

    async def delete_archived_transcripts(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` transcript lines of tasks archived (last changed) before
        ``before``; the task, its turns and their answers stay."""
        archived = sa.select(tasks.c.id).where(
            tasks.c.status == TaskStatus.ARCHIVED.value, tasks.c.updated_at < before
        )
        old = (
            sa.select(transcript.c.id)
            .where(transcript.c.task_id.in_(archived))
            .order_by(transcript.c.id)
            .limit(limit)
        )
        return await self._delete(transcript, old)

    async def delete_closed_holds(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` preflight holds made before ``before`` that are closed (their
        task started, or the owner cancelled it); a pending one waits for its answer."""
        old = (
            sa.select(preflight_holds.c.id)
            .where(preflight_holds.c.status != "pending", preflight_holds.c.created_at < before)
            .order_by(preflight_holds.c.id)
            .limit(limit)
        )
        return await self._delete(preflight_holds, old)

    async def _delete(self, table: sa.Table, ids: sa.Select[tuple[int]]) -> int:
        async with self._engine.begin() as conn:
            found = [r[0] for r in await conn.execute(ids)]
            if found:
                await conn.execute(table.delete().where(table.c.id.in_(found)))
        return len(found)
