"""One cheap reading of whether anything a person watches changed: tasks, their transcripts,
pending questions, tasks held by their preflight or at the terminal. The board's live pages poll
it once for all of them (``bot.board.events``) and read more only when it moved."""

from __future__ import annotations

import sqlalchemy as sa

from bot.models import QuestionStatus, WorktreeState
from bot.store.db import Database
from bot.store.preflights import PENDING
from bot.store.schema import (
    pending_questions,
    preflight_holds,
    tasks,
    terminal_holds,
    transcript,
    worktrees,
)


class PulseRepo:
    def __init__(self, engine: Database) -> None:
        self._engine = engine

    async def mark(self) -> tuple[object, ...]:
        """A value that differs after any change to a task row, a new transcript line, a new
        question or one answered or expired, a worktree merged, discarded or cut again, a hold
        made or settled; one statement (indexed maxima and counts)."""
        pending = pending_questions.c.status == QuestionStatus.PENDING.value
        active = worktrees.c.state == WorktreeState.ACTIVE.value
        held = preflight_holds.c.status == PENDING
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
            sa.select(sa.func.max(preflight_holds.c.id)).scalar_subquery(),
            sa.select(sa.func.count()).select_from(preflight_holds).where(held).scalar_subquery(),
            sa.select(sa.func.max(terminal_holds.c.since)).scalar_subquery(),
            sa.select(sa.func.count()).select_from(terminal_holds).scalar_subquery(),
        )
        async with self._engine.connect() as conn:
            return tuple((await conn.execute(query)).one())
