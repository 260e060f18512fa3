"""Rows of ``tasks`` and ``turns`` as records, and what a finished turn came to."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.models import ApprovalMode, Engine, Task, TaskKind, TaskStatus, Turn, TurnError
from bot.redaction import NOTHING, Redactor
from bot.store.db import aware, utc


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    status: TaskStatus
    result_text: str | None = None
    error: TurnError | None = None
    stderr_tail: str | None = None
    cost_usd: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    resume_at: datetime | None = None  # WAITING_FOR_LIMIT: when the engine's limit resets
    model: str | None = None  # what its tokens were priced as
    unpriced: bool = False  # no price known for that model: ``cost_usd`` is the caps' count


def task_of(row: Any) -> Task:
    m = row._mapping
    return Task(
        id=m["id"],
        owner_id=m["owner_id"],
        chat_id=m["chat_id"],
        engine=Engine(m["engine"]),
        kind=TaskKind(m["kind"]),
        slug=m["slug"],
        title=m["title"],
        cwd=m["cwd"],
        model=m["model"],
        status=TaskStatus(m["status"]),
        session_id=m["session_id"],
        locale=m["locale"],
        created_at=utc(m["created_at"]),
        updated_at=utc(m["updated_at"]),
        announced=bool(m["announced"]),
        total_cost_usd=m["total_cost_usd"] or 0.0,
        approval_mode=ApprovalMode(m["approval_mode"]),
        preset=m["preset"],
        max_usd=m["max_usd"],
        check=m["check_command"],
        check_repository=m["check_repository"],
        parent_id=m["parent_id"],
        subtasks=bool(m["subtasks"]),
        host=m["host"],
        session_host=m["session_host"],
        project=m["project"],
    )


def turn_of(row: Any, redact: Redactor = NOTHING) -> Turn:
    """A turn as read; the agent's words in it (answer, error, stderr) ``redact``ed: rows
    stored before redaction existed are shown redacted too."""
    m = row._mapping
    return Turn(
        id=m["id"],
        task_id=m["task_id"],
        seq=m["seq"],
        prompt=m["prompt"],
        status=TaskStatus(m["status"]),
        result_text=redact(m["result_text"]),
        error=redacted_error(TurnError.decode(m["error"]), redact),
        stderr_tail=redact(m["stderr_tail"]),
        cost_usd=m["cost_usd"],
        input_tokens=m["input_tokens"],
        output_tokens=m["output_tokens"],
        created_at=utc(m["created_at"]),
        started_at=aware(m["started_at"]),
        finished_at=aware(m["finished_at"]),
        check_round=m["check_round"],
        parked_at=aware(m["parked_at"]),
        limit_parks=m["limit_parks"],
        runner=m["runner"],
        host=m.get("host"),
        model=m["model"],
        unpriced=bool(m["unpriced"]),
    )


def redacted_error(error: TurnError | None, redact: Redactor) -> TurnError | None:
    """``error`` with its parameters (the agent's words, a crash's reason) ``redact``ed."""
    return TurnError(error.key, redact(dict(error.params))) if error is not None else None
