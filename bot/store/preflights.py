"""Walk-away tasks held by their preflight (a question for the owner, a refusal, an estimate over
the budget), from whichever door they came: the task as its door planned it, until an answer,
"Start anyway" or the wait's end starts it, or Drop."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from bot.models import ApprovalMode, NewTask, TaskKind
from bot.rows import PreflightHold, TaskFileRow
from bot.store.db import Clock, Database, aware
from bot.store.schema import preflight_holds

PENDING = "pending"


def encode_held(new: NewTask, file: TaskFileRow | None) -> str:
    """What a hold starts, as its row keeps it (where a worktree is cut is looked up again)."""
    fields = {f.name: getattr(new, f.name) for f in dataclasses.fields(NewTask)}
    fields.update(cwd=str(new.cwd), head=None)
    return json.dumps(
        {"new": fields, "file": dataclasses.asdict(file) if file else None}, ensure_ascii=False
    )


def decode_held(text: str | None) -> tuple[NewTask | None, TaskFileRow | None]:
    """The task and task file ``encode_held`` kept; (None, None) for a hold of before."""
    if not text:
        return None, None
    data = json.loads(text)
    known = {f.name for f in dataclasses.fields(NewTask)}
    fields = {k: v for k, v in data["new"].items() if k in known}
    new = NewTask(
        **{
            **fields,
            "cwd": Path(fields["cwd"]),
            "kind": TaskKind(fields["kind"]),
            "approval_mode": ApprovalMode(fields["approval_mode"]),
        }
    )
    file = TaskFileRow(**data["file"]) if data.get("file") else None
    return new, file


def _hold(row: Any) -> PreflightHold:
    answers = json.loads(row.answers or "[]")
    task, file = decode_held(row.task)
    return PreflightHold(
        id=row.id,
        owner_id=row.owner_id,
        chat_id=row.chat_id,
        locale=row.locale,
        reply_to=row.reply_to,
        text=row.text,
        with_options=bool(row.with_options),
        decision=row.decision,
        question=row.question,
        answers=tuple(str(a) for a in answers) if isinstance(answers, list) else (),
        reason=row.reason,
        cost_usd=row.cost_usd,
        status=row.status,
        answer=row.answer,
        row_id=row.row_id,
        deadline=aware(row.deadline) if row.deadline else None,
        task_id=row.task_id,
        task=task,
        file=file,
    )


class PreflightHoldRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def create(self, **values: Any) -> PreflightHold:
        """A pending hold; ``answers``: a sequence of strings."""
        values["answers"] = json.dumps(list(values.get("answers", ())), ensure_ascii=False)
        async with self._engine.begin() as conn:
            result = await conn.execute(
                preflight_holds.insert().values(status=PENDING, created_at=self._clock(), **values)
            )
            hold_id = int(result.inserted_primary_key[0])  # type: ignore[index]
        return await self.get(hold_id)  # type: ignore[return-value]

    async def get(self, hold_id: int) -> PreflightHold | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(preflight_holds.select().where(preflight_holds.c.id == hold_id))
            ).first()
        return _hold(row) if row is not None else None

    async def held(self, chat_id: int, reply_to: int) -> PreflightHold | None:
        """The hold a command message already made (a command Telegram delivered twice)."""
        query = preflight_holds.select().where(
            preflight_holds.c.chat_id == chat_id, preflight_holds.c.reply_to == reply_to
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _hold(row) if row is not None else None

    async def pending(self, chat_id: int | None = None) -> list[PreflightHold]:
        """The holds still waiting (of one chat), oldest first."""
        query = preflight_holds.select().where(preflight_holds.c.status == PENDING)
        if chat_id is not None:
            query = query.where(preflight_holds.c.chat_id == chat_id)
        async with self._engine.connect() as conn:
            rows = await conn.execute(query.order_by(preflight_holds.c.id))
            return [_hold(r) for r in rows]

    async def set_row(self, hold_id: int, row_id: int) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                preflight_holds.update()
                .where(preflight_holds.c.id == hold_id)
                .values(row_id=row_id)
            )

    async def resolve(self, hold_id: int, status: str, answer: str) -> bool:
        """Close a pending hold; False if it was closed already (a second tap, the expiry)."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                preflight_holds.update()
                .where(preflight_holds.c.id == hold_id, preflight_holds.c.status == PENDING)
                .values(status=status, answer=answer)
            )
        return result.rowcount == 1

    async def started(self, hold_id: int, task_id: int) -> None:
        """The hold's task has started: ``task_id``."""
        async with self._engine.begin() as conn:
            await conn.execute(
                preflight_holds.update()
                .where(preflight_holds.c.id == hold_id)
                .values(task_id=task_id)
            )

    async def of_task(self, task_id: int) -> PreflightHold | None:
        """The hold that started ``task_id`` (its question and the answer), if one did."""
        query = preflight_holds.select().where(preflight_holds.c.task_id == task_id)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query.order_by(preflight_holds.c.id.desc()))).first()
        return _hold(row) if row is not None else None

    async def due(self, now: datetime) -> list[PreflightHold]:
        """Pending holds whose wait for an answer has ended."""
        query = preflight_holds.select().where(
            preflight_holds.c.status == PENDING,
            preflight_holds.c.deadline.is_not(None),
            preflight_holds.c.deadline <= now,
        )
        async with self._engine.connect() as conn:
            return [_hold(r) for r in await conn.execute(query)]

    def now(self) -> datetime:
        return self._clock()
