"""Retention (``DETACH_RETENTION_DAYS``): pruning removes what is older than the retention and
keeps the rest, on SQLite and PostgreSQL; the bytes of delivered files go at once."""

from __future__ import annotations

import base64
import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

from bot.models import TaskStatus
from bot.store import Store
from bot.store.schema import outbox, transcript
from bot.upkeep.retention import Pruned, Retention
from tests.support.postgres import STORE_KINDS, opened_store
from tests.test_store import Clock, new


@pytest.fixture(params=STORE_KINDS)
async def db(request, tmp_path):
    """A Store and its clock, on a real SQLite file and on the machine's PostgreSQL."""
    clock = Clock()
    async with opened_store(request.param, tmp_path, clock) as store:
        yield store, clock


FILE = base64.b64encode(b"x" * 3000).decode()


async def _document(store: Store, task_id: int, delivered: bool) -> int:
    payload = {"data": FILE, "filename": "answer.md", "caption": "📄 the answer", "silent": True}
    row = await store.outbox.add(1, "document", payload, task_id, "result")
    if delivered:
        await store.outbox.sent(row, 100 + row)
    return row


async def _message(store: Store, task_id: int, delivered: bool) -> int:
    row = await store.outbox.add(1, "send", {"text": f"card of #{task_id}"}, task_id, "result")
    if delivered:
        await store.outbox.sent(row, 100 + row)
    return row


async def _lines(store: Store, task_id: int, turn_id: int, n: int = 3) -> None:
    await store.transcript.append(
        task_id, turn_id, [("text", {"text": f"line {i}"}) for i in range(n)]
    )


async def _rows(store: Store) -> tuple[dict[int, str], dict[int, int]]:
    """Outbox rows (id -> payload) and transcript lines per task."""
    async with store.engine.connect() as conn:
        rows = {
            r.id: r.payload for r in await conn.execute(sa.select(outbox.c.id, outbox.c.payload))
        }
        lines = dict(
            (r[0], r[1])
            for r in await conn.execute(
                sa.select(transcript.c.task_id, sa.func.count()).group_by(transcript.c.task_id)
            )
        )
    return rows, lines


async def test_pruning_removes_what_is_older_than_the_retention_and_keeps_the_rest(db):
    store, clock = db
    old_archived, turn_a = await store.tasks.create(new("old and archived"), "old-archived")
    old_done, turn_b = await store.tasks.create(new("old and done"), "old-done")
    for task, turn in ((old_archived, turn_a), (old_done, turn_b)):
        await _lines(store, task.id, turn.id)
    await store.tasks.set_status(old_done.id, TaskStatus.DONE)
    await store.tasks.set_status(old_archived.id, TaskStatus.ARCHIVED)
    old_doc = await _document(store, old_archived.id, delivered=True)
    old_card = await _message(store, old_done.id, delivered=True)
    old_waiting = await _message(store, old_done.id, delivered=False)  # never delivered yet

    clock.now += timedelta(days=100)  # the above is 100 days old now
    recent_archived, turn_c = await store.tasks.create(new("recent"), "recent")
    await _lines(store, recent_archived.id, turn_c.id)
    await store.tasks.set_status(recent_archived.id, TaskStatus.ARCHIVED)
    recent_doc = await _document(store, recent_archived.id, delivered=True)
    pending_doc = await _document(store, recent_archived.id, delivered=False)
    recent_card = await _message(store, recent_archived.id, delivered=True)

    retention = Retention(store, days=90, clock=clock, batch=2)  # batches of 2: several each
    pruned = await retention.prune_once()
    assert pruned == Pruned(files=2, outbox=2, transcript=3, held=0)
    rows, lines = await _rows(store)
    assert set(rows) == {old_waiting, recent_doc, pending_doc, recent_card}
    assert old_doc not in rows and old_card not in rows
    assert json.loads(rows[recent_doc])["data"] == ""  # delivered: its bytes are gone
    assert json.loads(rows[recent_doc])["filename"] == "answer.md"  # the row stays
    assert json.loads(rows[pending_doc])["data"] == FILE  # still to send: kept whole
    # the old archived task's transcript is gone; a done one's and a recent one's stay
    assert lines == {old_done.id: 3, recent_archived.id: 3}
    assert (await store.tasks.get(old_archived.id)).title == "old and archived"  # type: ignore[union-attr]
    assert await retention.prune_once() == Pruned()  # nothing left to do

    forever = Retention(store, days=0, clock=clock)
    clock.now += timedelta(days=1000)
    assert await forever.prune_once() == Pruned()


async def _hold(store: Store, status: str | None) -> int:
    hold = await store.preflights.create(
        owner_id=1,
        chat_id=1,
        locale="en",
        reply_to=None,
        text="tidy it",
        with_options=True,
        decision="ask",
        question="Which part?",
        answers=("all",),
    )
    if status is not None:
        assert await store.preflights.resolve(hold.id, status, "all")
    return hold.id


async def test_closed_preflight_holds_past_the_retention_are_pruned_pending_ones_kept(db):
    store, clock = db
    old_started = await _hold(store, "answered")
    old_cancelled = await _hold(store, "cancelled")
    old_pending = await _hold(store, None)  # still waiting for its answer: kept, however old
    clock.now += timedelta(days=100)
    recent_started = await _hold(store, "anyway")

    pruned = await Retention(store, days=90, clock=clock, batch=1).prune_once()
    assert pruned == Pruned(holds=2)
    assert await store.preflights.get(old_started) is None
    assert await store.preflights.get(old_cancelled) is None
    assert await store.preflights.get(old_pending) is not None
    assert await store.preflights.get(recent_started) is not None
