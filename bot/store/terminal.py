"""Hand-off between the phone and a terminal: which tasks are held at the terminal (by whom,
since when), and which task, if any, already continues an engine's session."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from bot.store.db import Clock, Database, utc
from bot.store.schema import tasks, terminal_holds


@dataclass(frozen=True, slots=True)
class TerminalHold:
    """Task ``task_id`` is at the terminal: ``user_id`` took it there at ``since``."""

    task_id: int
    user_id: int
    since: datetime
    parked: dict[int, str] = field(default_factory=dict)  # refused replies: message id, text
    row_id: int | None = None  # the message saying so (edited when it is taken back)


MAX_PARKED = 10  # refused replies kept per hold (the oldest go)


def _hold(row: Any) -> TerminalHold:
    try:
        stored = json.loads(row.parked or "{}")
    except ValueError:
        stored = {}
    parked = {int(k): str(v) for k, v in stored.items()} if isinstance(stored, dict) else {}
    return TerminalHold(row.task_id, row.user_id, utc(row.since), parked, row.row_id)


class TerminalRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def hold(self, task_id: int, user_id: int) -> TerminalHold | None:
        """Hold the task at the terminal from now; None when it is held already."""
        if await self.get(task_id) is not None:
            return None
        async with self._engine.begin() as conn:
            await conn.execute(
                terminal_holds.insert().values(
                    task_id=task_id, user_id=user_id, since=self._clock()
                )
            )
        return await self.get(task_id)

    async def get(self, task_id: int) -> TerminalHold | None:
        query = terminal_holds.select().where(terminal_holds.c.task_id == task_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _hold(row) if row is not None else None

    async def release(self, task_id: int) -> TerminalHold | None:
        """Take the task back from the terminal; the hold it was (None: it was not held)."""
        held = await self.get(task_id)
        if held is None:
            return None
        async with self._engine.begin() as conn:
            result = await conn.execute(
                terminal_holds.delete().where(terminal_holds.c.task_id == task_id)
            )
        return held if result.rowcount == 1 else None

    async def set_row(self, task_id: int, row_id: int) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                terminal_holds.update()
                .where(terminal_holds.c.task_id == task_id)
                .values(row_id=row_id)
            )

    async def park(self, task_id: int, message_id: int, text: str) -> bool:
        """Keep a refused reply for "Take back and send it"; False when not held (any more).
        Read and written in one transaction: two replies refused at once both stay."""
        async with self._engine.atomic():
            held = await self.get(task_id)
            if held is None:
                return False
            parked = {**held.parked, message_id: text}
            kept = dict(sorted(parked.items())[-MAX_PARKED:])
            async with self._engine.begin() as conn:
                result = await conn.execute(
                    terminal_holds.update()
                    .where(terminal_holds.c.task_id == task_id)
                    .values(parked=json.dumps({str(k): v for k, v in kept.items()}))
                )
            return result.rowcount == 1

    async def task_with_session(self, engine: str, session_id: str) -> int | None:
        """The task that continues ``engine``'s session ``session_id`` (archived ones too)."""
        query = sa.select(tasks.c.id).where(
            tasks.c.engine == engine, tasks.c.session_id == session_id
        )
        async with self._engine.connect() as conn:
            return (await conn.execute(query.limit(1))).scalar()

    def now(self) -> datetime:
        return self._clock()
