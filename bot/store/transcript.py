"""A task's transcript: its agent's events, appended in batches, read back as a tail or whole."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

import sqlalchemy as sa

from bot.redaction import NOTHING, Redactor
from bot.rows import TranscriptLine
from bot.store.db import Clock, Database, inserting, utc
from bot.store.schema import tasks, transcript


class Writer(Protocol):
    def write(self, text: str, /) -> int: ...


class TranscriptRepo:
    """Events are appended in batches and read back as a tail; never loaded whole."""

    def __init__(self, engine: Database, clock: Clock, redact: Redactor = NOTHING) -> None:
        """``redact``: applied to every event written and read (lines stored before a value
        was known as a secret, or before redaction existed, are shown redacted too)."""
        self._engine = engine
        self._clock = clock
        self._redact = redact

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
                body=json.dumps(
                    self._redact(body), ensure_ascii=False, default=str
                ),  # times as ISO text
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

    async def after(
        self, task_id: int, cursor: int, limit: int = 200, owner_id: int | None = None
    ) -> list[TranscriptLine]:
        """A task's events newer than ``cursor`` (an event id; 0: from the start), oldest
        first, at most ``limit``; ``owner_id``: none unless the task is theirs (one query)."""
        query = (
            transcript.select()
            .where(transcript.c.task_id == task_id, transcript.c.id > cursor)
            .order_by(transcript.c.id)
            .limit(limit)
        )
        if owner_id is not None:
            theirs = sa.exists().where(tasks.c.id == task_id, tasks.c.owner_id == owner_id)
            query = query.where(theirs)
        async with self._engine.connect() as conn:
            return [self._line(r) for r in await conn.execute(query)]

    async def last_of(self, task_id: int, kind: str) -> TranscriptLine | None:
        """A task's newest event of ``kind``, or None."""
        query = (
            transcript.select()
            .where(transcript.c.task_id == task_id, transcript.c.kind == kind)
            .order_by(transcript.c.id.desc())
            .limit(1)
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return self._line(row) if row is not None else None

    async def tail(self, task_id: int, limit: int = 50) -> list[TranscriptLine]:
        query = (
            transcript.select()
            .where(transcript.c.task_id == task_id)
            .order_by(transcript.c.id.desc())
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            rows = list(await conn.execute(query))
        return [self._line(r) for r in reversed(rows)]

    def _line(self, row: Any) -> TranscriptLine:
        body = self._redact(json.loads(row.body))
        return TranscriptLine(row.id, row.turn_id, row.kind, body, utc(row.created_at))
