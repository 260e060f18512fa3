"""One cheap reading of whether anything a person watches changed: tasks, their transcripts and
pending questions. The board's live pages poll it once for all of them (``bot.board.events``)
and read more only when it moved."""

from __future__ import annotations

import sqlalchemy as sa

from bot.models import QuestionStatus, WorktreeState
from bot.store.db import Database
from bot.store.schema import pending_questions, tasks, transcript, worktrees


class PulseRepo:
    def __init__(self, engine: Database) -> None:
        self._engine = engine

    async def mark(self) -> tuple[object, ...]:
        """A value that differs after any change to a task row, a new transcript line, a new
        question or one answered or expired, a worktree merged, discarded or cut again; one
        statement (indexed maxima and counts)."""
        pending = pending_questions.c.status == QuestionStatus.PENDING.value
        active = worktrees.c.state == WorktreeState.ACTIVE.value
        query = sa.select(
            sa.select(sa.func.max(transcript.c.id)).scalar_subquery(),
            sa.select(sa.func.max(tasks.c.updated_at)).scalar_subquery(),
            sa.select(sa.func.count()).select_from(tasks).scalar_subquery(),
            sa.select(sa.func.max(pending_questions.c.id)).scalar_subquery(),
            sa.select(sa.func.count())
            .select_from(pending_questions)
            .where(pending)
            .scalar_subquery(),
            sa.select(sa.func.count()).select_from(worktrees).where(active).scalar_subquery(),
        )
        async with self._engine.connect() as conn:
            return tuple((await conn.execute(query)).one())
