"""Rows of the durable outbox: queued Telegram sends, edits and deletes."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from bot.errors import clean
from bot.models import OutboxOp, OutboxStatus
from bot.redaction import NOTHING, Redactor
from bot.store.db import DEFERRED, Clock, Database, aware, inserting, updating
from bot.store.schema import outbox

PENDING, SENT, FAILED, SUPERSEDED = (
    OutboxStatus.PENDING,
    OutboxStatus.SENT,
    OutboxStatus.FAILED,
    OutboxStatus.SUPERSEDED,
)


@dataclass(frozen=True, slots=True)
class OutboxRow:
    id: int
    chat_id: int
    op: str
    payload: dict[str, Any]
    task_id: int | None
    link_kind: str | None
    attempts: int
    status: str = OutboxStatus.PENDING


async def _queued(
    conn: Any, values: dict[str, Any], coalesce_key: str | None, options: dict[str, Any]
) -> Any:
    """A row inserted; a pending older edit of the same message superseded first."""
    if coalesce_key is not None:
        await conn.execute(_supersede(), {"key": coalesce_key}, execution_options=DEFERRED)
    return await conn.execute(inserting(outbox), values, execution_options=options)


class OutboxRepo:
    def __init__(self, engine: Database, clock: Clock, redact: Redactor = NOTHING) -> None:
        """``redact``: applied to every payload queued (a progress line naming a command, a
        question, a card): no secret is stored here nor sent to Telegram."""
        self._engine = engine
        self._clock = clock
        self._redact = redact

    async def add(
        self,
        chat_id: int,
        op: OutboxOp,
        payload: dict[str, Any],
        task_id: int | None,
        link_kind: str | None,
        coalesce_key: str | None = None,
    ) -> int:
        """Queue a row; a newer edit of the same message supersedes a pending older one.
        Returns the row's id."""
        values = self._values(chat_id, op, payload, task_id, link_kind, coalesce_key)
        async with self._engine.begin() as conn:
            result = await _queued(conn, values, coalesce_key, {})
            return int(result.inserted_primary_key[0])  # type: ignore[index]

    async def queue(
        self,
        chat_id: int,
        op: OutboxOp,
        payload: dict[str, Any],
        task_id: int | None,
        link_kind: str | None,
        coalesce_key: str | None = None,
    ) -> None:
        """``add``, for a row whose id nobody needs (an edit, a deletion): its writes ride
        with the transaction's next trip to the store (``DEFERRED``)."""
        values = self._values(chat_id, op, payload, task_id, link_kind, coalesce_key)
        async with self._engine.begin() as conn:
            await _queued(conn, values, coalesce_key, DEFERRED)

    def _values(
        self,
        chat_id: int,
        op: OutboxOp,
        payload: dict[str, Any],
        task_id: int | None,
        link_kind: str | None,
        coalesce_key: str | None,
    ) -> dict[str, Any]:
        now = self._clock()
        return {
            "chat_id": chat_id,
            "op": op,
            "payload": _json(self._redact(payload)),
            "task_id": task_id,
            "link_kind": link_kind,
            "coalesce_key": coalesce_key,
            "status": PENDING,
            "not_before": now,
            "created_at": now,
        }

    async def due(self, limit: int = 500) -> list[OutboxRow]:
        """The oldest pending row of each chat, where it is due: a row waiting to retry holds
        back the rows queued after it in its chat, so a chat's order survives retries. Its
        payload redacted again with the secrets this process knows: a row another process
        queued (`detach mcp`, which knows fewer) is sent redacted by the bot's."""
        now = self._clock()
        async with self._engine.connect() as conn:
            rows = list(await conn.execute(_pending(), {"limit": limit}))
        first: dict[int, Any] = {}
        for row in rows:
            first.setdefault(row.chat_id, row)
        due = [_row(r) for r in first.values() if _aware(r.not_before) <= now]
        return [replace(r, payload=self._redact(r.payload)) for r in due]

    async def retire(self, row_id: int) -> None:
        """A message whose moment passed: never sent if it is still pending."""
        async with self._engine.begin() as conn:
            await conn.execute(
                outbox.update().where(outbox.c.id == row_id).values(retired_at=self._clock())
            )
            await conn.execute(
                outbox.update()
                .where(outbox.c.id == row_id, outbox.c.status == PENDING)
                .values(status=SUPERSEDED)
            )

    async def live(self, task_ids: list[int], link_kind: str) -> list[tuple[int, int]]:
        """(row id, chat id) of the messages of ``link_kind`` about these tasks that were
        queued and not retired (a progress message a crash left behind)."""
        query = sa.select(outbox.c.id, outbox.c.chat_id).where(
            outbox.c.task_id.in_(task_ids),
            outbox.c.op == OutboxOp.SEND,
            outbox.c.link_kind == link_kind,
            outbox.c.retired_at.is_(None),
            outbox.c.status.in_([PENDING, SENT]),
        )
        async with self._engine.connect() as conn:
            return [(r[0], r[1]) for r in await conn.execute(query)]

    async def first_send(self, task_id: int, link_kind: str) -> tuple[int, int, str] | None:
        """(row id, chat id, text) of the first message of ``link_kind`` about a task (its
        acknowledgement), unless it was never delivered or was removed."""
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(_first_send(), {"task_id": task_id, "kind": link_kind})
            ).first()
        if row is None:
            return None
        return row[0], row[1], str(json.loads(row[2]).get("text", ""))

    async def newest_send(self, task_id: int, link_kind: str) -> OutboxRow | None:
        """The newest message of ``link_kind`` about a task, delivered or waiting; locked
        until the transaction ends (its payload is about to be rewritten)."""
        query = (
            outbox.select()
            .where(*_sent_about(task_id, link_kind))
            .order_by(outbox.c.id.desc())
            .limit(1)
            .with_for_update()
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _row(row) if row is not None else None

    async def get(self, row_id: int) -> OutboxRow | None:
        """One row by id; locked until the transaction ends (its payload may be rewritten)."""
        query = outbox.select().where(outbox.c.id == row_id).with_for_update()
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _row(row) if row is not None else None

    async def sends_about(self, task_id: int, link_kinds: Sequence[str]) -> list[OutboxRow]:
        """The messages of these kinds about a task, delivered or waiting, not removed, oldest
        first; locked until the transaction ends (their payloads are about to be rewritten)."""
        query = (
            outbox.select()
            .where(
                outbox.c.task_id == task_id,
                outbox.c.op == OutboxOp.SEND,
                outbox.c.link_kind.in_(list(link_kinds)),
                outbox.c.retired_at.is_(None),
                outbox.c.status.in_([PENDING, SENT]),
            )
            .order_by(outbox.c.id)
            .with_for_update()
        )
        async with self._engine.connect() as conn:
            return [_row(r) for r in await conn.execute(query)]

    async def relink(self, row_id: int, link_kind: str) -> None:
        """The message is now of ``link_kind`` (a "cancelling…" reply that became the card)."""
        await self._update(row_id, link_kind=link_kind)

    async def with_task_buttons(self, chat_id: int, task_id: int) -> list[OutboxRow]:
        """The messages in a chat that carry a button of this task (cards, a restart's
        notice that lists it), delivered or waiting, newest last. Locked until the transaction
        ends: two tasks of one notice resumed at once (PostgreSQL) each rewrite its buttons
        after the other, never from the same old copy."""
        query = (
            outbox.select()
            .where(
                outbox.c.chat_id == chat_id,
                outbox.c.op == OutboxOp.SEND,
                outbox.c.retired_at.is_(None),
                outbox.c.status.in_([PENDING, SENT]),
                outbox.c.payload.like(f'%"t:%:{task_id}"%'),
            )
            .order_by(outbox.c.id)
            .with_for_update()
        )
        async with self._engine.connect() as conn:
            return [_row(r) for r in await conn.execute(query)]

    async def with_buttons_of(self, chat_id: int, task_ids: Sequence[int]) -> list[OutboxRow]:
        """``with_task_buttons`` for many tasks at once: one scan of the chat's messages that
        carry a task button, kept when one is of ``task_ids``; newest last."""
        query = (
            outbox.select()
            .where(
                outbox.c.chat_id == chat_id,
                outbox.c.op == OutboxOp.SEND,
                outbox.c.retired_at.is_(None),
                outbox.c.status.in_([PENDING, SENT]),
                outbox.c.payload.like('%"t:%'),
                # a task's buttons are on its own messages (or on one of no task)
                sa.or_(outbox.c.task_id.in_(list(task_ids)), outbox.c.task_id.is_(None)),
            )
            .order_by(outbox.c.id)
            .with_for_update()
        )
        ids = {str(task_id) for task_id in task_ids}
        async with self._engine.connect() as conn:
            rows = [_row(r) for r in await conn.execute(query)]
        return [r for r in rows if ids & _button_tasks(r.payload)]

    async def sent(self, row_id: int, message_id: int | None) -> None:
        await self._update(row_id, status=SENT, sent_at=self._clock(), message_id=message_id)

    async def failed(self, row_id: int, error: str) -> None:
        await self._update(row_id, status=FAILED, error=error[:500])

    async def retry_later(
        self, row_id: int, attempts: int, not_before: datetime, error: str
    ) -> None:
        await self._update(row_id, attempts=attempts, not_before=not_before, error=error[:500])

    async def replace_payload(self, row_id: int, payload: dict[str, Any]) -> None:
        await self._update(row_id, payload=_json(self._redact(payload)))

    async def state(self, row_id: int) -> tuple[str, int | None]:
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(
                    sa.select(outbox.c.status, outbox.c.message_id).where(outbox.c.id == row_id)
                )
            ).first()
        return (row.status, row.message_id) if row else (FAILED, None)

    async def message_id_of(self, row_id: int) -> int | None:
        async with self._engine.connect() as conn:
            return (await conn.execute(_message_id(), {"row_id": row_id})).scalar()

    async def count(self, status: str) -> int:
        async with self._engine.connect() as conn:
            return int(
                (
                    await conn.execute(sa.select(sa.func.count()).where(outbox.c.status == status))
                ).scalar_one()
            )

    async def _update(self, row_id: int, **values: Any) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(updating(outbox), {"b_id": row_id, **values})


# The statements a turn's messages run, built once (each took longer to build than to run).
@functools.cache
def _supersede() -> sa.Update:
    """A newer edit of the same message supersedes a pending older one (parameter: key)."""
    return (
        outbox.update()
        .where(outbox.c.coalesce_key == sa.bindparam("key"), outbox.c.status == PENDING)
        .values(status=SUPERSEDED)
    )


@functools.cache
def _pending() -> sa.Select[Any]:
    """The pending rows, oldest first (parameter: limit)."""
    query = outbox.select().where(outbox.c.status == PENDING).order_by(outbox.c.id)
    return query.limit(sa.bindparam("limit", type_=sa.Integer))


@functools.cache
def _first_send() -> sa.Select[Any]:
    """The first message of a kind about a task (parameters: task_id, kind)."""
    about = _sent_about(sa.bindparam("task_id"), sa.bindparam("kind"))
    query = sa.select(outbox.c.id, outbox.c.chat_id, outbox.c.payload).where(*about)
    return query.order_by(outbox.c.id).limit(1)


@functools.cache
def _message_id() -> sa.Select[Any]:
    return sa.select(outbox.c.message_id).where(outbox.c.id == sa.bindparam("row_id"))


def _button_tasks(payload: dict[str, Any]) -> set[str]:
    """The task ids its task buttons (``t:<action>:<id>``) name."""
    keyboard = (payload.get("markup") or {}).get("inline_keyboard") or []
    data = (str(b.get("callback_data", "")) for line in keyboard for b in line)
    return {d.rsplit(":", 1)[1] for d in data if d.startswith("t:") and d.count(":") == 2}


def _row(r: Any) -> OutboxRow:
    return OutboxRow(
        r.id, r.chat_id, r.op, json.loads(r.payload), r.task_id, r.link_kind, r.attempts, r.status
    )


def _json(payload: dict[str, Any]) -> str:
    """The payload as JSON; text with a lone surrogate (which neither the store nor Telegram
    takes) has it replaced."""
    text = json.dumps(payload, ensure_ascii=False)
    return clean(text)


def _aware(value: datetime) -> datetime:
    return aware(value)  # type: ignore[return-value]


def _sent_about(task_id: Any, link_kind: Any) -> tuple[Any, ...]:
    """Messages of ``link_kind`` about a task, delivered or waiting, not removed."""
    return (
        outbox.c.task_id == task_id,
        outbox.c.op == OutboxOp.SEND,
        outbox.c.link_kind == link_kind,
        outbox.c.retired_at.is_(None),
        outbox.c.status.in_([PENDING, SENT]),
    )
