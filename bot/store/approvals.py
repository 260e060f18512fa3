"""Pending questions (approvals and agent questions) and remembered grants."""

from __future__ import annotations

import functools
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from bot.models import ApprovalAnswer, QuestionKind, QuestionStatus
from bot.redaction import NOTHING, Redactor
from bot.rows import PendingQuestion
from bot.store.db import Clock, Connection, Database, aware, utc
from bot.store.schema import grants, pending_questions

PENDING = QuestionStatus.PENDING


@dataclass(frozen=True, slots=True)
class Grant:
    id: int
    user_id: int
    engine: str
    cwd: str
    pattern: str
    created_at: datetime


def _question(row: Any) -> PendingQuestion:
    m = row._mapping
    return PendingQuestion(
        m["id"],
        m["task_id"],
        m["turn_id"],
        QuestionKind(m["kind"]),
        json.loads(m["payload"]),
        m["status"],
        m["chat_id"],
        m["message_id"],
        aware(m["deadline"]),
        m["answer"],
        m["row_id"],
    )


class QuestionRepo:
    def __init__(self, engine: Database, clock: Clock, redact: Redactor = NOTHING) -> None:
        """``redact``: applied to a question's payload as it is written: what it shows (a tool's
        input, the agent's question) and the rule an "Always" would remember (one holding a
        secret then matches nothing, and the next such request asks again)."""
        self._engine = engine
        self._clock = clock
        self._redact = redact

    async def create(
        self,
        task_id: int,
        turn_id: int | None,
        kind: QuestionKind,
        payload: dict[str, Any],
        deadline: datetime | None,
    ) -> PendingQuestion:
        async with self._engine.begin() as conn:
            result = await conn.execute(
                pending_questions.insert().values(
                    task_id=task_id,
                    turn_id=turn_id,
                    kind=kind,
                    status=PENDING,
                    payload=json.dumps(self._redact(payload), ensure_ascii=False),
                    deadline=deadline,
                    created_at=self._clock(),
                )
            )
            qid = int(result.inserted_primary_key[0])  # type: ignore[index]
        return await self.get(qid)  # type: ignore[return-value]

    async def answered(self, task_id: int, kind: QuestionKind) -> list[PendingQuestion]:
        """A task's questions of ``kind`` the owner answered, oldest first."""
        query = (
            pending_questions.select()
            .where(
                pending_questions.c.task_id == task_id,
                pending_questions.c.kind == kind,
                pending_questions.c.status == QuestionStatus.ANSWERED.value,
            )
            .order_by(pending_questions.c.id)
        )
        async with self._engine.connect() as conn:
            return [_question(r) for r in await conn.execute(query)]

    async def pending_count(self, task_id: int) -> int:
        """How many questions of a task wait for the owner."""
        query = sa.select(sa.func.count()).where(
            pending_questions.c.task_id == task_id, pending_questions.c.status == PENDING.value
        )
        async with self._engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def pending_of(self, task_ids: Collection[int]) -> list[PendingQuestion]:
        """The questions of these tasks that wait for the owner, oldest first."""
        if not task_ids:
            return []
        query = (
            pending_questions.select()
            .where(
                pending_questions.c.task_id.in_(list(task_ids)),
                pending_questions.c.status == PENDING.value,
            )
            .order_by(pending_questions.c.id)
        )
        async with self._engine.connect() as conn:
            return [_question(r) for r in await conn.execute(query)]

    async def get(self, qid: int) -> PendingQuestion | None:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(pending_questions.select().where(pending_questions.c.id == qid))
            ).first()
        return _question(row) if row else None

    async def set_message(self, qid: int, chat_id: int, message_id: int) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                pending_questions.update()
                .where(pending_questions.c.id == qid)
                .values(chat_id=chat_id, message_id=message_id)
            )

    async def set_row(self, qid: int, row_id: int) -> None:
        """The outbox row of the question's message (known before it is delivered)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                pending_questions.update()
                .where(pending_questions.c.id == qid)
                .values(row_id=row_id)
            )

    async def toggle(self, qid: int, option: int) -> list[int] | None:
        """Select ``option`` of an open multi-select question, or unselect it if it was: one
        transaction on the row (locked on PostgreSQL), so taps at once lose none. Returns the
        selection now; None: the question is closed."""
        async with self._engine.begin() as conn:
            payload = await _open_payload(conn, qid)
            if payload is None:
                return None
            selected = [i for i in payload.get("selected") or [] if i != option]
            if len(selected) == len(payload.get("selected") or []):
                selected.append(option)
            payload["selected"] = selected
            await conn.execute(
                pending_questions.update()
                .where(pending_questions.c.id == qid)
                .values(payload=json.dumps(payload, ensure_ascii=False))
            )
        return selected

    async def resolve_selected(self, qid: int, options: Sequence[str]) -> str | None:
        """Done on an open multi-select question: answered with its selection as it stands in
        the same transaction that closes it (the row locked on PostgreSQL, like ``toggle``), so
        a tap that selected just before is in the answer. Returns the answer (the selected
        ``options``, in their order); None: the question was closed already."""
        async with self._engine.begin() as conn:
            payload = await _open_payload(conn, qid)
            if payload is None:
                return None
            picked = sorted(payload.get("selected") or [])
            answer = ", ".join(options[i] for i in picked if 0 <= i < len(options))
            await conn.execute(
                pending_questions.update()
                .where(pending_questions.c.id == qid)
                .values(status=QuestionStatus.ANSWERED, answer=answer, answered_at=self._clock())
            )
        return answer

    async def resolve(self, qid: int, status: str, answer: str) -> bool:
        """Close a pending question; False if it was closed already (second tap, expiry)."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                pending_questions.update()
                .where(pending_questions.c.id == qid, pending_questions.c.status == PENDING)
                .values(status=status, answer=answer, answered_at=self._clock())
            )
        return result.rowcount == 1

    async def supersede(self, task_id: int, kind: QuestionKind) -> list[PendingQuestion]:
        """A newer question of ``kind`` is asked for the task: its open ones of that kind are
        expired (``superseded``) and returned, in one conditional statement, so a tap on one
        at the same time either answers it first or finds it expired."""
        statement = (
            pending_questions.update()
            .where(
                pending_questions.c.task_id == task_id,
                pending_questions.c.kind == kind,
                pending_questions.c.status == PENDING,
            )
            .values(
                status=QuestionStatus.EXPIRED,
                answer=ApprovalAnswer.SUPERSEDED,
                answered_at=self._clock(),
            )
            .returning(pending_questions)
        )
        async with self._engine.begin() as conn:
            rows = list(await conn.execute(statement))
        return sorted((_question(r) for r in rows), key=lambda q: q.id)

    async def expire_pending(
        self, turn_ids: Collection[int] | None = None, answer: str = ApprovalAnswer.RESTART
    ) -> list[PendingQuestion]:
        """Nobody waits for these any more (the process that asked died): expire the pending
        questions (of ``turn_ids``; None: all of them) and return them. A budget question is
        no process's to wait for (its answer queues the next turn): it stays open."""
        mine = sa.and_(
            pending_questions.c.status == PENDING, pending_questions.c.kind != QuestionKind.BUDGET
        )
        if turn_ids is not None:
            mine = sa.and_(mine, pending_questions.c.turn_id.in_(list(turn_ids)))
        async with self._engine.begin() as conn:
            rows = list(await conn.execute(pending_questions.select().where(mine)))
            if not rows:  # the usual turn's end: it asked nothing, or all was answered
                return []
            await conn.execute(
                pending_questions.update()
                .where(pending_questions.c.id.in_([r.id for r in rows]))
                .values(status=QuestionStatus.EXPIRED, answer=answer, answered_at=self._clock())
            )
        return [_question(r) for r in rows]


class GrantRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def add(self, user_id: int, engine: str, cwd: str, pattern: str) -> Grant:
        existing = [g for g in await self.active(user_id, engine, cwd) if g.pattern == pattern]
        if existing:
            return existing[0]
        async with self._engine.begin() as conn:
            await conn.execute(
                grants.insert().values(
                    user_id=user_id,
                    engine=engine,
                    cwd=cwd,
                    pattern=pattern,
                    created_at=self._clock(),
                )
            )
        return [g for g in await self.active(user_id, engine, cwd) if g.pattern == pattern][0]

    async def active(
        self, user_id: int, engine: str | None = None, cwd: str | None = None
    ) -> list[Grant]:
        query = _active_grants(engine is not None, cwd is not None)
        params = {"user_id": user_id, "engine": engine, "cwd": cwd}
        async with self._engine.connect() as conn:
            return [
                Grant(r.id, r.user_id, r.engine, r.cwd, r.pattern, utc(r.created_at))
                for r in await conn.execute(query, params)
            ]

    async def revoke(self, user_id: int, grant_id: int) -> Grant | None:
        found = [g for g in await self.active(user_id) if g.id == grant_id]
        if not found:
            return None
        async with self._engine.begin() as conn:
            await conn.execute(
                grants.update().where(grants.c.id == grant_id).values(revoked_at=self._clock())
            )
        return found[0]


@functools.cache
def _active_grants(by_engine: bool, by_cwd: bool) -> sa.Select[Any]:
    """A user's grants not revoked, oldest first (parameters: user_id, and engine and cwd when
    filtered by them); read before every turn: built once."""
    query = grants.select().where(
        grants.c.user_id == sa.bindparam("user_id"), grants.c.revoked_at.is_(None)
    )
    if by_engine:
        query = query.where(grants.c.engine == sa.bindparam("engine"))
    if by_cwd:
        query = query.where(grants.c.cwd == sa.bindparam("cwd"))
    return query.order_by(grants.c.id)


async def _open_payload(conn: Connection, qid: int) -> dict[str, Any] | None:
    """The payload of question ``qid`` if it is open, its row locked for the rest of the
    transaction on PostgreSQL (SQLite has one writer at a time); None: closed, or gone."""
    query = sa.select(pending_questions.c.payload).where(
        pending_questions.c.id == qid, pending_questions.c.status == PENDING
    )
    row = (await conn.execute(query.with_for_update())).first()
    return None if row is None else dict(json.loads(row.payload))
