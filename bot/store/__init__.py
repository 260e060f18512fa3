"""The Store: one engine, migrated on open, with one repository per concept."""

from __future__ import annotations

from bot.redaction import NOTHING, Redactor
from bot.store.approvals import Grant, GrantRepo, PendingQuestion, QuestionRepo
from bot.store.checks import CheckRepo
from bot.store.claims import ClaimRepo
from bot.store.copies import PendingCopy, PendingCopyRepo
from bot.store.db import Clock, Database, Engine, make_engine, utcnow
from bot.store.drafts import VoiceDraftRepo
from bot.store.engine_state import EngineLimitRepo, EngineSessionRepo
from bot.store.engine_windows import EngineWindowRepo, UsageWindow
from bot.store.journal import UpdateJournalRepo
from bot.store.migrations import migrate
from bot.store.outbox import OutboxRepo
from bot.store.placement import TaskFileRepo, TaskFileRow, WorktreeRepo, WorktreeRow
from bot.store.preflights import PreflightHoldRepo
from bot.store.prs import PrRepo
from bot.store.pulse import PulseRepo
from bot.store.ran import RanRepo
from bot.store.records import AuditEntry, AuditRepo, LinkRepo, SpendRepo
from bot.store.recovery import RecoveryRepo
from bot.store.retention import RetentionRepo
from bot.store.runners import EnginePresence, Presence, Runner, RunnerRepo
from bot.store.schedules import Schedule, ScheduleRepo
from bot.store.settings import ChatSettingsRepo, UserSettingsRepo
from bot.store.stalls import StallRepo
from bot.store.task_rows import TurnOutcome
from bot.store.tasks import TaskRepo
from bot.store.terminal import TerminalRepo
from bot.store.topics import Topic, TopicRepo
from bot.store.transcript import TranscriptLine, TranscriptRepo
from bot.store.waits import WaitRepo

__all__ = [
    "AuditEntry",
    "Grant",
    "UsageWindow",
    "PendingQuestion",
    "PendingCopy",
    "EnginePresence",
    "Presence",
    "Runner",
    "Schedule",
    "Store",
    "TaskFileRow",
    "Topic",
    "TranscriptLine",
    "TurnOutcome",
    "WorktreeRow",
]


class Store:
    """The app's record of truth: SQLAlchemy Core on SQLite (WAL) or PostgreSQL."""

    def __init__(self, engine: Engine, clock: Clock = utcnow, redact: Redactor = NOTHING) -> None:
        """``redact``: the secret values no agent-made text is stored with (transcript lines,
        checks' output, questions, outbox rows) nor read back with (rows older than that)."""
        self.engine = engine
        self.redact = redact
        db = self._db = Database(engine)
        self.atomic = db.atomic  # one transaction for a state change and what reports it
        self.after_commit = db.after_commit
        self.tasks = TaskRepo(db, clock, redact)
        self.recovery = RecoveryRepo(db, clock)  # turns a crash or a lost runner left running
        self.claims = ClaimRepo(db, clock)  # the queue of turns: submit, claim, park, stop
        self.transcript = TranscriptRepo(db, clock, redact)
        self.links = LinkRepo(db)
        self.spend = SpendRepo(db, clock)
        self.audit = AuditRepo(db, clock)
        self.questions = QuestionRepo(db, clock, redact)
        self.copies = PendingCopyRepo(db)  # /pending's copies of questions and holds
        self.preflights = PreflightHoldRepo(db, clock)  # tasks held by their preflight
        self.waits = WaitRepo(db)  # what each task waits for (bot.models.WaitState)
        self.grants = GrantRepo(db, clock)
        self.chats = ChatSettingsRepo(db, clock)
        self.users = UserSettingsRepo(db, clock)
        self.outbox = OutboxRepo(db, clock, redact)
        self.worktrees = WorktreeRepo(db, clock)
        self.task_files = TaskFileRepo(db, clock)
        self.prs = PrRepo(db, clock)  # worktree tasks' pull requests (bot.prs)
        self.schedules = ScheduleRepo(db, clock)
        self.journal = UpdateJournalRepo(db, clock)
        self.checks = CheckRepo(db, clock, redact)
        self.engine_sessions = EngineSessionRepo(db, clock)
        self.limits = EngineLimitRepo(db, clock)
        self.windows = EngineWindowRepo(db, clock)  # the plans' usage windows engines report
        self.runners = RunnerRepo(db, clock)  # scale-out: the leases of runners
        self.pulse = PulseRepo(db)  # whether anything changed (the board's live pages)
        self.drafts = VoiceDraftRepo(db, clock)  # voice notes' transcripts (bot.voice)
        self.topics = TopicRepo(db, clock)  # forum topics: a topic per task
        self.retention = RetentionRepo(db, clock)  # what is pruned (``bot.upkeep.retention``)
        self.terminal = TerminalRepo(db, clock)  # hand-off: tasks held at the terminal
        self.stalls = StallRepo(db, redact)  # stall watchdogs' messages, and Keep waiting
        self.ran = RanRepo(db)  # the model that actually ran each task

    @classmethod
    async def open(cls, url: str, clock: Clock = utcnow, redact: Redactor = NOTHING) -> Store:
        engine = make_engine(url)
        async with engine.begin() as conn:
            await conn.run_sync(migrate)
        return cls(engine, clock, redact)

    async def close(self) -> None:
        await self.engine.dispose()
