"""The model that actually ran each task, as its engine named it (``turns.model``), and the host
that ran it (``turns.host``, scale-out), each read in one statement for a whole list: its
newest turn's that named one."""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from bot.store.db import Database
from bot.store.schema import turns


class RanRepo:
    def __init__(self, engine: Database) -> None:
        self._engine = engine

    async def models(self, task_ids: Sequence[int]) -> dict[int, str]:
        """By task: the model of its newest turn that named one (the others are not in it)."""
        return await self._newest(turns.c.model, task_ids)

    async def hosts(self, task_ids: Sequence[int]) -> dict[int, str]:
        """By task: the host of its newest turn that ran on one (scale-out; none in one
        process)."""
        return await self._newest(turns.c.host, task_ids)

    async def _newest(self, column: sa.Column[str], task_ids: Sequence[int]) -> dict[int, str]:
        """By task: ``column`` of its newest turn where it is set, in one statement."""
        if not task_ids:
            return {}
        t = turns.c
        query = (
            sa.select(t.task_id, column)
            .where(t.task_id.in_(list(task_ids)), column.is_not(None))
            .order_by(t.seq)  # the newest is read last: it says
        )
        async with self._engine.connect() as conn:
            return {task_id: value for task_id, value in await conn.execute(query)}
