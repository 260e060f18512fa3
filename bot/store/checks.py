"""Results of tasks' checks: one row per run, the output capped."""

from __future__ import annotations

from typing import Any

from bot.models import CheckResult
from bot.redaction import NOTHING, Redactor
from bot.store.db import Clock, Database
from bot.store.schema import task_checks

OUTPUT_CAP = 256 * 1024  # the end of the output is what tells why a check failed


def _result(row: Any, redact: Redactor) -> CheckResult:
    m = row._mapping
    return CheckResult(
        command=m["command"],
        passed=bool(m["passed"]),
        exit_code=m["exit_code"],
        output=redact(m["output"]),
        duration_s=m["duration_s"],
        round=m["round"],
        timed_out=bool(m["timed_out"]),
        approved=bool(m["approved"]),
    )


class CheckRepo:
    def __init__(self, engine: Database, clock: Clock, redact: Redactor = NOTHING) -> None:
        """``redact``: applied to the output as it is written and read (older rows)."""
        self._engine = engine
        self._clock = clock
        self._redact = redact

    async def record(self, task_id: int, turn_id: int, result: CheckResult) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                task_checks.insert().values(
                    task_id=task_id,
                    turn_id=turn_id,
                    round=result.round,
                    command=result.command,
                    passed=result.passed,
                    exit_code=result.exit_code,
                    timed_out=result.timed_out,
                    duration_s=result.duration_s,
                    output=self._redact(result.output[-OUTPUT_CAP:]),
                    approved=result.approved,
                    created_at=self._clock(),
                )
            )

    async def for_turn(self, turn_id: int) -> CheckResult | None:
        query = (
            task_checks.select()
            .where(task_checks.c.turn_id == turn_id)
            .order_by(task_checks.c.id.desc())
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _result(row, self._redact) if row else None

    async def last(self, task_id: int) -> CheckResult | None:
        query = (
            task_checks.select()
            .where(task_checks.c.task_id == task_id)
            .order_by(task_checks.c.id.desc())
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _result(row, self._redact) if row else None
