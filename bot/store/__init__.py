"""The Store: one engine, migrated on open, with one repository per concept."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from bot.store.approvals import Grant, GrantRepo, PendingQuestion, QuestionRepo
from bot.store.db import Clock, make_engine, utcnow
from bot.store.outbox import OutboxRepo
from bot.store.placement import TaskFileRepo, TaskFileRow, WorktreeRepo, WorktreeRow
from bot.store.records import (
    AuditRepo,
    ChatSettingsRepo,
    LinkRepo,
    SpendRepo,
    TranscriptLine,
    TranscriptRepo,
    UserSettingsRepo,
)
from bot.store.schedules import Schedule, ScheduleRepo
from bot.store.schema import migrate
from bot.store.tasks import TaskRepo, TurnOutcome

__all__ = ["Grant", "PendingQuestion", "Schedule", "Store", "TaskFileRow", "TranscriptLine",
           "TurnOutcome", "WorktreeRow"]


class Store:
    """The app's record of truth: SQLAlchemy Core on SQLite (aiosqlite, WAL) or PostgreSQL."""

    def __init__(self, engine: AsyncEngine, clock: Clock = utcnow) -> None:
        self.engine = engine
        self.tasks = TaskRepo(engine, clock)
        self.transcript = TranscriptRepo(engine, clock)
        self.links = LinkRepo(engine)
        self.spend = SpendRepo(engine, clock)
        self.audit = AuditRepo(engine, clock)
        self.questions = QuestionRepo(engine, clock)
        self.grants = GrantRepo(engine, clock)
        self.chats = ChatSettingsRepo(engine, clock)
        self.users = UserSettingsRepo(engine, clock)
        self.outbox = OutboxRepo(engine, clock)
        self.worktrees = WorktreeRepo(engine, clock)
        self.task_files = TaskFileRepo(engine, clock)
        self.schedules = ScheduleRepo(engine, clock)

    @classmethod
    async def open(cls, url: str, clock: Clock = utcnow) -> Store:
        engine = make_engine(url)
        async with engine.begin() as conn:
            await conn.run_sync(migrate)
        return cls(engine, clock)

    async def close(self) -> None:
        await self.engine.dispose()
