"""What each task waits for, read in one statement for a whole list: its oldest pending
question and whether it is held at the terminal, named by ``bot.models.waiting_for``."""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa

from bot.models import QuestionStatus, Task, WaitState, waiting_for
from bot.store.db import Database
from bot.store.schema import pending_questions, terminal_holds


class WaitRepo:
    def __init__(self, engine: Database) -> None:
        self._engine = engine

    async def of(self, tasks: Sequence[Task]) -> dict[int, WaitState]:
        """The tasks of ``tasks`` that wait, and for what (the others are not in it)."""
        ids = [t.id for t in tasks]
        if not ids:
            return {}
        q = pending_questions.c
        asked_query = sa.select(q.task_id, q.kind, q.payload, q.id.label("question")).where(
            q.task_id.in_(ids), q.status == QuestionStatus.PENDING.value
        )
        held_query = sa.select(  # a hold: no kind, no question
            terminal_holds.c.task_id, sa.null(), sa.null(), sa.null().label("question")
        ).where(terminal_holds.c.task_id.in_(ids))
        # questions newest first: the oldest is read last, and says (a hold's place is moot)
        query = sa.union_all(asked_query, held_query).order_by(sa.column("question").desc())
        asked: dict[int, WaitState] = {}
        held: set[int] = set()
        async with self._engine.connect() as conn:
            for task_id, kind, payload, question in await conn.execute(query):
                if question is None:
                    held.add(task_id)
                else:
                    asked[task_id] = WaitState.asked(kind, _checks(payload))
        found = {t.id: waiting_for(t.status, asked.get(t.id), t.id in held) for t in tasks}
        return {task_id: wait for task_id, wait in found.items() if wait is not None}


def _checks(payload: str | None) -> bool:
    """The question asks for a repository's check (``bot.approvals.consent``)."""
    try:
        return bool(json.loads(payload or "{}").get("check"))
    except (ValueError, AttributeError):
        return False
