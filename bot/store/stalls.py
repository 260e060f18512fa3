"""The stall watchdog's message of a running turn, kept where every process sees it: the
process that runs the turn writes what its watchdog said (``bot.turns.stall``), whichever
process handles a tap on Keep waiting silences it (``bot.approvals.answers``), and the turn's
end takes it away. Each change is one conditional statement, so of a tap and the turn's end
(or two taps) exactly one wins, whichever processes they happen in."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bot.redaction import NOTHING, Redactor
from bot.store.db import Database, upsert
from bot.store.schema import stall_notices


class StallNoticeState(StrEnum):
    """Where a watchdog's message stands."""

    OPEN = "open"  # its buttons are live
    WAITING = "waiting"  # its owner chose Keep waiting: no more word about the turn


@dataclass(frozen=True, slots=True)
class StallNotice:
    """The latest message of a turn's watchdog: where it is (its outbox row) and what it said."""

    turn_id: int
    chat_id: int
    row_id: int
    text: str
    state: StallNoticeState = StallNoticeState.OPEN


def _notice(row: Any) -> StallNotice:
    return StallNotice(row.turn_id, row.chat_id, row.row_id, row.text, StallNoticeState(row.state))


class StallRepo:
    def __init__(self, engine: Database, redact: Redactor = NOTHING) -> None:
        """``redact``: applied to a message's text as it is written (it may name the command
        an agent's tool runs)."""
        self._engine = engine
        self._redact = redact

    async def get(self, turn_id: int, *, lock: bool = False) -> StallNotice | None:
        """``lock`` (inside ``Store.atomic``): the row stays locked until that transaction
        ends, so a tap meanwhile waits for it (PostgreSQL; SQLite's writers take turns)."""
        query = stall_notices.select().where(stall_notices.c.turn_id == turn_id)
        if lock:
            query = query.with_for_update()
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return _notice(row) if row is not None else None

    async def spoke(self, notice: StallNotice) -> None:
        """The watchdog's message of the turn is this one now (its buttons live)."""
        values = {
            "chat_id": notice.chat_id,
            "row_id": notice.row_id,
            "text": self._redact(notice.text),
            "state": notice.state.value,
        }
        async with self._engine.begin() as conn:
            await upsert(conn, stall_notices, {"turn_id": notice.turn_id}, values)

    async def silence(self, turn_id: int) -> StallNotice | None:
        """Keep waiting: the turn's open message becomes silenced, and is returned to edit.
        None: nothing open (silenced already, or the turn has ended)."""
        statement = (
            stall_notices.update()
            .where(
                stall_notices.c.turn_id == turn_id,
                stall_notices.c.state == StallNoticeState.OPEN.value,
            )
            .values(state=StallNoticeState.WAITING.value)
            .returning(stall_notices)
        )
        async with self._engine.begin() as conn:
            row = (await conn.execute(statement)).first()
        return _notice(row) if row is not None else None

    async def end(self, turn_id: int, row_id: int) -> StallNotice | None:
        """The run that sent message ``row_id`` is over: that message is forgotten and returned
        as it stood then (None: the turn's message is another run's now, or none). A tap after
        this finds nothing. Only that row: a process that lost the turn to another runner
        never takes away the message the new one sent (nor the Keep waiting tapped there)."""
        statement = (
            stall_notices.delete()
            .where(stall_notices.c.turn_id == turn_id, stall_notices.c.row_id == row_id)
            .returning(stall_notices)
        )
        async with self._engine.begin() as conn:
            row = (await conn.execute(statement)).first()
        return _notice(row) if row is not None else None

    async def end_turns(self, turn_ids: Collection[int] | None = None) -> list[StallNotice]:
        """The runs of ``turn_ids`` are gone (a crash, a runner taken over; None: every turn,
        at the start of the one process): their messages are forgotten and returned as they
        stood, whichever run sent them, to be closed."""
        statement = stall_notices.delete().returning(stall_notices)
        if turn_ids is not None:
            statement = statement.where(stall_notices.c.turn_id.in_(list(turn_ids)))
        async with self._engine.begin() as conn:
            rows = list(await conn.execute(statement))
        return sorted((_notice(r) for r in rows), key=lambda n: n.turn_id)
