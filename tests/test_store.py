"""The Store on a real SQLite file."""

from __future__ import annotations

import asyncio
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.errors import TurnTaken
from bot.models import NewTask, TaskKind, TaskStatus
from bot.store import Store, TurnOutcome
from bot.store.migrations import MIGRATIONS
from tests.support.postgres import STORE_KINDS, opened_store


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@pytest.fixture(params=STORE_KINDS)
async def store(request, tmp_path):  # type: ignore[no-untyped-def]
    """The same Store code on a real SQLite file and on the machine's PostgreSQL."""
    async with opened_store(request.param, tmp_path, Clock()) as opened:
        yield opened


def new(prompt: str = "fix the login", owner: int = 1, engine: str = "claude") -> NewTask:
    return NewTask(
        owner_id=owner,
        chat_id=owner,
        engine=engine,
        kind=TaskKind.DETACH,
        prompt=prompt,
        cwd=Path("/tmp"),
    )


async def test_migrations_are_idempotent_and_recorded(tmp_path):
    url = f"sqlite+aiosqlite:///{tmp_path}/m.sqlite"
    for _ in range(2):
        store = await Store.open(url)
        async with store.engine.connect() as conn:
            version = (await conn.exec_driver_sql("SELECT version FROM schema_version")).scalar()
            mode = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
        await store.close()
        assert version == len(MIGRATIONS) and mode == "wal"


async def test_a_turn_is_claimed_once(store):
    task, turn = await store.tasks.create(new(), "fix-login")
    assert task.label == "#1 fix-login" and task.status is TaskStatus.QUEUED
    running, claimed = await store.claims.claim_turn(turn.id)
    assert claimed.status is TaskStatus.RUNNING and claimed.started_at is not None
    assert running.status is TaskStatus.RUNNING
    assert await store.claims.claim_turn(turn.id) is None
    assert (await store.tasks.get(task.id)).status is TaskStatus.RUNNING


async def test_follow_ups_queue_behind_the_running_turn_in_order(store):
    task, first = await store.tasks.create(new(), "t")
    await store.claims.claim_turn(first.id)
    second = await store.tasks.add_turn(task.id, "two")
    third = await store.tasks.add_turn(task.id, "three")
    assert await store.claims.next_queued_turn(task.id) is None  # one turn per task at a time
    assert await store.claims.claim_turn(second.id) is None
    after, _ = await store.tasks.finish_turn(
        first, TurnOutcome(TaskStatus.DONE, "ok", cost_usd=0.5)
    )
    assert after.status is TaskStatus.QUEUED and after.total_cost_usd == 0.5
    assert (await store.claims.next_queued_turn(task.id)).id == second.id
    assert await store.claims.claim_turn(third.id) is None  # not before the older one
    assert (await store.claims.claim_turn(second.id))[1].seq == 2


async def test_cancelled_queued_turn_cannot_be_claimed(store):
    task, turn = await store.tasks.create(new(), "t")
    assert await store.tasks.cancel_queued(task.id) == 1
    assert await store.claims.claim_turn(turn.id) is None


async def test_restart_interrupts_running_turns_and_requeues_queued(store):
    running, turn = await store.tasks.create(new("a"), "a")
    await store.claims.claim_turn(turn.id)
    waiting, queued_turn = await store.tasks.create(new("b"), "b")
    await store.claims.mark_submitted(queued_turn.id)
    interrupted = await store.recovery.interrupt_running()
    assert [t.id for t in interrupted] == [running.id]
    assert interrupted[0].status is TaskStatus.INTERRUPTED
    assert (await store.tasks.get_turn(turn.id)).status is TaskStatus.INTERRUPTED
    assert await store.claims.unsubmitted_task_ids() == []
    await store.claims.unsubmit_queued()
    assert await store.claims.unsubmitted_task_ids() == [waiting.id]


async def test_a_dead_runners_turns_are_taken_once_and_stops_travel_by_row(store):
    """Only the dead runner's turns are taken; a turn asked to stop is cancelled, not offered
    for Resume; a second taker gets nothing; the dead runner can write nothing any more."""
    mine, my_turn = await store.tasks.create(new("mine"), "mine")
    await store.claims.claim_turn(my_turn.id, "worker-a")
    stopping, stopping_turn = await store.tasks.create(new("stop"), "stop")
    await store.claims.claim_turn(stopping_turn.id, "worker-a")
    theirs, their_turn = await store.tasks.create(new("theirs"), "theirs")
    await store.claims.claim_turn(their_turn.id, "worker-b")
    assert await store.claims.request_stop(stopping.id)
    assert await store.claims.stop_requested(stopping_turn.id)
    assert not await store.claims.stop_requested(my_turn.id)
    assert await store.claims.runner_of(mine.id) == "worker-a"
    interrupted, cancelled, taken = await store.recovery.interrupt_runners(["worker-a"])
    assert [t.id for t in interrupted] == [mine.id]
    assert [t.id for t in cancelled] == [stopping.id]
    assert sorted(taken) == sorted([my_turn.id, stopping_turn.id])
    assert cancelled[0].status is TaskStatus.CANCELLED
    assert (await store.tasks.get(theirs.id)).status is TaskStatus.RUNNING
    assert await store.recovery.interrupt_runners(["worker-a"]) == ([], [], [])  # taken once
    with pytest.raises(TurnTaken):  # the dead runner's late outcome is refused
        await store.tasks.finish_turn(my_turn, TurnOutcome(TaskStatus.DONE), "worker-a")
    assert (await store.tasks.get(mine.id)).status is TaskStatus.INTERRUPTED
    assert [t.id for t in await store.recovery.interrupt_running()] == [theirs.id]  # one process
    assert not await store.claims.request_stop(theirs.id)  # nothing runs any more


async def test_runners_claim_each_submitted_turn_once_oldest_first(store):
    """Three runners claim at once: every submitted turn goes to one of them, a task's second
    turn only after its first, engines a runner does not have are left, unsubmitted turns too."""
    ids = []
    for n in range(30):
        task, turn = await store.tasks.create(new(f"t{n}"), f"t{n}")
        await store.claims.mark_submitted(turn.id)
        ids.append(turn.id)
    follow = await store.tasks.add_turn(1, "again")
    await store.claims.mark_submitted(follow.id)
    other, other_turn = await store.tasks.create(new("codex", engine="codex"), "codex")
    await store.claims.mark_submitted(other_turn.id)
    await store.tasks.create(new("unsubmitted"), "unsubmitted")
    claimed: dict[str, list[int]] = {"a": [], "b": [], "c": []}
    for runner in [*claimed, "gone"]:
        await store.runners.register(runner, runner, "h", "worker", 30)
    assert await store.runners.take("gone", dead=True)
    assert await store.claims.claim_next("gone", ["claude"]) is None  # taken: claims nothing
    assert await store.claims.claim_next("unknown", ["claude"]) is None  # no lease

    async def claim(runner: str) -> None:
        while (got := await store.claims.claim_next(runner, ["claude"])) is not None:
            task, turn = got
            assert task.status is TaskStatus.RUNNING and turn.runner == runner
            claimed[runner].append(turn.id)

    await asyncio.gather(*(claim(r) for r in claimed))
    every = sorted(t for runs in claimed.values() for t in runs)
    assert every == ids  # each once; not the follow-up, not codex's, not the unsubmitted
    await store.tasks.finish_turn(
        await store.tasks.get_turn(ids[0]),
        TurnOutcome(TaskStatus.DONE),
        claimed_by(claimed, ids[0]),
    )
    got = await store.claims.claim_next("a", ["claude", "codex"])
    assert got is not None and got[1].id == follow.id  # submitted before codex's
    got = await store.claims.claim_next("a", ["claude", "codex"])
    assert got is not None and got[1].id == other_turn.id


def claimed_by(claimed: dict[str, list[int]], turn_id: int) -> str:
    return next(runner for runner, turns in claimed.items() if turn_id in turns)


async def test_runners_lease_lapses_and_is_taken_once(store):
    await store.runners.register("w1@h#a", "w1", "h", "worker", 30)
    assert await store.runners.beat("w1@h#a", ["claude"], 30)
    assert not await store.runners.take("w1@h#a")  # alive
    task, turn = await store.tasks.create(new("w"), "w")
    await store.claims.claim_turn(turn.id, "w1@h#a")
    assert await store.runners.lapsed_with_turns() == []
    assert await store.runners.beat("w1@h#a", ["claude"], -1)  # its lease: already over
    assert await store.runners.lapsed_with_turns() == ["w1@h#a"]
    assert await store.runners.take("w1@h#a")
    assert not await store.runners.beat("w1@h#a", ["claude"], 30)  # it finds itself taken
    await store.runners.register("w1@h#b", "w1", "h", "worker", 30)
    assert await store.runners.earlier("w1", "h", "w1@h#b") == []  # #a was taken
    assert await store.runners.take("legacy-identity")  # no row: its turns decide
    listed = {r.id: r for r in await store.runners.listed(60)}
    assert listed["w1@h#a"].running == 1 and listed["w1@h#a"].engines == ("claude",)
    fresh = listed["w1@h#b"]
    assert fresh.running == 0 and not fresh.lapsed(fresh.heartbeat_at)


async def test_transcript_is_read_back_as_a_tail(store):
    task, turn = await store.tasks.create(new(), "t")
    await store.transcript.append(
        task.id, turn.id, [("TextEmitted", {"text": str(i)}) for i in range(100)]
    )
    tail = await store.transcript.tail(task.id, 3)
    assert [line.body["text"] for line in tail] == ["97", "98", "99"]


async def test_links_map_messages_to_tasks(store):
    task, _ = await store.tasks.create(new(), "t")
    await store.links.link(10, 500, task.id, "result")
    await store.links.link(10, 500, task.id, "result")  # idempotent
    assert await store.links.task_for(10, 500) == task.id
    assert await store.links.task_for(10, 501) is None


async def test_the_update_journal_keeps_an_update_once(store):
    await store.journal.keep(7, '{"update_id": 7}')
    await store.journal.keep(7, '{"update_id": 7, "again": true}')  # Telegram re-sent it
    assert await store.journal.pending() == [(7, '{"update_id": 7}')]
    await store.journal.done(7)
    assert await store.journal.pending() == []


async def test_listing_and_archiving_are_per_owner(store):
    mine, _ = await store.tasks.create(new(owner=1), "a")
    theirs, _ = await store.tasks.create(new(owner=2), "b")
    await store.tasks.set_status(mine.id, TaskStatus.DONE)
    await store.tasks.set_status(theirs.id, TaskStatus.DONE)
    assert [t.id for t in await store.tasks.list_for(1)] == [mine.id]
    assert len(await store.tasks.archive_finished(1)) == 1
    assert (await store.tasks.get(theirs.id)).status is TaskStatus.DONE


async def test_spend_ledger_per_user_and_day(store):
    await store.spend.record(1, 1, 1, 0.25, 100, 20)
    await store.spend.record(1, 1, 2, 0.5, 100, 20)
    await store.spend.record(2, 2, 3, 9.0, 100, 20)
    assert await store.spend.day_total(1, "2026-11-29") == 0.75


async def test_a_version_1_database_is_migrated_in_place(tmp_path):
    import sqlalchemy as sa

    from bot.store.db import make_engine
    from bot.store.migrations import migrate

    url = f"sqlite+aiosqlite:///{tmp_path}/old.sqlite"
    engine = make_engine(url)
    async with engine.begin() as conn:  # what version 1 created, with a task in it
        await conn.exec_driver_sql("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        await conn.exec_driver_sql("INSERT INTO schema_version VALUES (1)")
        await conn.exec_driver_sql(
            "CREATE TABLE tasks (id INTEGER PRIMARY KEY, owner_id BIGINT NOT NULL, "
            "chat_id BIGINT NOT NULL, engine VARCHAR(16) NOT NULL, kind VARCHAR(16) NOT NULL, "
            "slug VARCHAR(64) NOT NULL, title TEXT NOT NULL, cwd TEXT NOT NULL, model VARCHAR(128),"
            " status VARCHAR(16) NOT NULL, session_id VARCHAR(128), locale VARCHAR(8) NOT NULL "
            "DEFAULT 'en', announced BOOLEAN NOT NULL DEFAULT 1, total_cost_usd FLOAT NOT NULL "
            "DEFAULT 0, created_at DATETIME NOT NULL, updated_at DATETIME NOT NULL)"
        )
        await conn.exec_driver_sql(
            "CREATE TABLE pending_questions (id INTEGER PRIMARY KEY, task_id INTEGER NOT NULL, "
            "turn_id INTEGER, kind VARCHAR(24) NOT NULL, payload TEXT NOT NULL DEFAULT '{}', "
            "status VARCHAR(16) NOT NULL, chat_id BIGINT, message_id BIGINT, deadline DATETIME, "
            "created_at DATETIME NOT NULL, answered_at DATETIME)"
        )
        await conn.exec_driver_sql(
            "INSERT INTO tasks VALUES (1, 1, 1, 'claude', 'detach', 'old', 'old task', '/tmp', "
            "NULL, 'done', NULL, 'en', 1, 0, '2026-01-01', '2026-01-01')"
        )
        assert await conn.run_sync(migrate) == len(MIGRATIONS)
        columns = await conn.run_sync(
            lambda c: [x["name"] for x in sa.inspect(c).get_columns("tasks")]
        )
    await engine.dispose()
    store = await Store.open(url)
    task = await store.tasks.get(1)
    await store.close()
    assert "approval_mode" in columns and task.title == "old task"


def test_turn_errors_are_keys_with_params_and_old_text_is_kept():
    from bot.models import TurnError

    error = TurnError("turn_error.not_installed", {"engine": "codex", "binary": "–"})
    assert TurnError.decode(error.encode()) == error
    assert TurnError.decode("the bot stopped while this turn ran") == TurnError(
        "turn_error.text", {"text": "the bot stopped while this turn ran"}
    )
    assert TurnError.decode(None) is None


HOLD_LOCK = """
import sqlite3, sys, time
other = sqlite3.connect(sys.argv[1])
other.execute("BEGIN IMMEDIATE")  # this process's writer holds the lock
print("locked", flush=True)
time.sleep(float(sys.argv[2]))
other.commit()
"""


async def test_a_write_waits_for_another_process_lock_without_blocking_the_loop(tmp_path):
    """While another process (as `detach add` would be) holds SQLite's write lock, the bot's
    write waits for it on aiosqlite's thread (SQLite's busy timeout), never on the loop's: a
    heartbeat on the loop keeps ticking without a gap, reads still answer, and the write lands
    once the lock is released."""
    path = tmp_path / "detach.sqlite"
    store = await Store.open(f"sqlite+aiosqlite:///{path}")
    task, _turn = await store.tasks.create(new(), "t")
    held_s = 1.0
    other = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOLD_LOCK, str(path), str(held_s), stdout=asyncio.subprocess.PIPE
    )
    try:
        assert other.stdout is not None
        assert await asyncio.wait_for(other.stdout.readline(), 30) == b"locked\n"
        started = time.monotonic()
        write = asyncio.create_task(store.tasks.add_turn(task.id, "again"))
        gaps, last = [], time.monotonic()
        while not write.done():  # the heartbeat: the loop is free while the write waits
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now
            assert (await store.tasks.get(task.id)) is not None  # reads do not wait
        added = await asyncio.wait_for(write, 5)
        waited = time.monotonic() - started
        assert added.seq == 2
        assert waited >= held_s * 0.5, waited  # it did wait for the other process
        assert max(gaps) < held_s / 2, max(gaps)  # and the loop never stood still meanwhile
        assert len(gaps) >= 10
    finally:
        if other.returncode is None:
            other.kill()
        await asyncio.wait_for(other.wait(), 10)
        await store.close()


async def test_the_queue_index_is_made_by_the_migration_on_a_new_database(store):
    """``ix_turns_queue`` (only the queued turns, oldest first) is not declared in the schema
    (its WHERE would load SQLAlchemy's PostgreSQL dialect into every SQLite bot): a new
    database gets it from migration 19, partial, on SQLite and PostgreSQL alike."""
    import sqlalchemy as sa

    query = (
        "SELECT sql FROM sqlite_master WHERE name = 'ix_turns_queue'"
        if store.engine.dialect.name == "sqlite"
        else "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_turns_queue'"
    )
    async with store.engine.connect() as conn:
        ddl = (await conn.execute(sa.text(query))).scalar()
    assert ddl is not None and "submitted_at" in ddl and "'queued'" in ddl


async def test_sqlite_results_outlive_their_connection_and_the_pool_never_makes_a_caller_wait(
    tmp_path,
):
    """A result is buffered when its statement runs, so it is still readable after its
    connection went back to the pool (and no read holds a snapshot open); forty connections
    held at once across awaits are all given out (past its idle ones the pool opens more
    instead of making the forty-first wait for one of the others, which only the loop's other
    tasks could give back)."""
    import sqlalchemy as sa

    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite")
    try:
        for n in range(5):
            await store.tasks.create(new(f"task {n}"), f"t{n}")
        async with store.engine.connect() as conn:
            result = await conn.execute(sa.text("SELECT id FROM tasks ORDER BY id"))
        assert [row[0] for row in result] == [1, 2, 3, 4, 5]
        holding = asyncio.Event()
        held = 0

        async def hold() -> int:
            nonlocal held
            async with store.engine.connect() as conn:
                held += 1
                if held == 40:
                    holding.set()
                await asyncio.wait_for(holding.wait(), 5)
                return (await conn.execute(sa.text("SELECT count(*) FROM tasks"))).scalar_one()

        assert await asyncio.gather(*(hold() for _ in range(40))) == [5] * 40
    finally:
        await store.close()


async def test_a_turns_statements_are_built_once(store):
    """Every statement on the path from a command to its agent and from the verdict to the card
    is built once and run with parameters: a second turn runs the very statement objects of
    the first (a statement built per call cost ~0.3 ms of a cold path before SQLite even ran
    it, a quarter of the bot's own time per turn)."""
    import sqlalchemy as sa

    from bot.events import SessionStarted
    from bot.turns.outcome import transcript_entry

    seen: list[list[object]] = []
    sync_engine = store.engine.sync_engine

    def record(conn, clauseelement, *args):  # type: ignore[no-untyped-def]
        seen[-1].append(clauseelement)

    sa.event.listen(sync_engine, "before_execute", record)
    try:
        for n in range(2):
            seen.append([])
            task, turn = await store.tasks.create(new(f"turn {n}"), f"t{n}", submitted=True)
            # a chat not read before (on SQLite a chat's choices are kept once read)
            await store.chats.get(1000 + n)
            await store.chats.notify(1000 + n)
            await store.links.task_for(task.chat_id, 100 + n)
            await store.links.link(task.chat_id, 100 + n, task.id, "command")
            await store.limits.active()
            await store.spend.day_total(task.owner_id, store.spend.today())
            await store.audit.record("task_created", task.owner_id, task.id, "claude")
            await store.grants.active(task.owner_id, task.engine, task.cwd)
            await store.tasks.set_session(task.id, f"s{n}")
            event = transcript_entry(SessionStarted(f"s{n}", "m"))
            await store.transcript.append(task.id, turn.id, [event, event])
            await store.worktrees.get(task.id)
            await store.spend.record(task.owner_id, task.id, turn.id, 0.01, 1, 1)
            await store.journal.keep(500 + n, "{}")
            await store.journal.done(500 + n)
    finally:
        sa.event.remove(sync_engine, "before_execute", record)
    first, second = seen
    assert len(first) == len(second) >= 14
    rebuilt = [str(b) for a, b in zip(first, second, strict=True) if a is not b]
    assert rebuilt == []
