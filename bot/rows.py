"""The records a use case hands to a surface, as the store reads and writes them: a pending
question, a transcript line, a task file's row, a preflight's hold, a schedule, a voice draft.
Plain frozen values on the lowest floor, so a surface names them without importing the store."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from bot.models import NewTask, QuestionKind


@dataclass(frozen=True, slots=True)
class PendingQuestion:
    id: int
    task_id: int
    turn_id: int | None
    kind: QuestionKind
    payload: dict[str, Any]
    status: str
    chat_id: int | None
    message_id: int | None
    deadline: datetime | None
    answer: str | None
    row_id: int | None = None  # the outbox row of its message


@dataclass(frozen=True, slots=True)
class TranscriptLine:
    line: int
    turn_id: int
    kind: str
    body: dict[str, Any]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class TaskFileRow:
    task_id: int
    source: str
    goal: str
    constraints: str


@dataclass(frozen=True, slots=True)
class PreflightHold:
    """``status``: pending, then answered / anyway / expired (each starts the task once, then
    ``task_id`` names it) or cancelled (dropped); ``decision``: ask, refuse, or budget (a go
    whose estimate is more than the task has left); ``text``: the goal as shown; ``task``: the
    task to start (None: a hold of before, started from ``text``); ``file``: the task file it
    came from (its ``task_id`` 0 until it starts)."""

    id: int
    owner_id: int
    chat_id: int
    locale: str
    reply_to: int | None
    text: str
    with_options: bool
    decision: str
    question: str
    answers: tuple[str, ...]
    reason: str
    cost_usd: float | None
    status: str
    answer: str | None
    row_id: int | None
    deadline: datetime | None
    task_id: int | None = None
    task: NewTask | None = None
    file: TaskFileRow | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    id: int
    owner_id: int
    chat_id: int
    cron: str | None
    run_at: datetime | None
    tz: str
    text: str
    locale: str
    state: str
    last_run_at: datetime | None
    runs: int
    created_at: datetime


class DraftStatus(StrEnum):
    PENDING = "pending"  # shown, waiting for a tap
    STARTED = "started"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class VoiceDraft:
    """``notes``: the keys of what the draft message says besides the text (a cut note, a
    language the offline recognizer does not know), comma-separated. ``task_id``: the task
    Start began, or (set when it is made) the task whose topic the note came from, which
    Start continues."""

    id: int
    owner_id: int
    chat_id: int
    message_id: int
    locale: str
    text: str
    notes: tuple[str, ...]
    status: DraftStatus
    row_id: int | None
    task_id: int | None
