"""How many store round trips one text turn makes (issue #54): every statement on aiosqlite is
a hop to its connection's thread and back (about 0.5 ms idle), so their number, per phase of a
turn, is capped here at what it is today; a change that adds one fails this test and has to
lower a cut elsewhere or raise the cap with its reason.

Phases: accepting the update (the journal's row), creating the task (task, first turn, link,
audit line, acknowledgement and the claim in one transaction), everything the store is asked
from the update until the agent is spawned, and finishing the turn (outcome, task, spend and
card in one transaction). Counted through SQLAlchemy's events on the real SQLite file; the
trips to aiosqlite's thread (what each costs: a future resolved from another thread) are counted
at aiosqlite's own queue, per phase, with the transaction's commit (bot/store/onehop.py: one trip
a statement, a deferred write none of its own)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
import sqlalchemy as sa

from bot.events import SessionStarted, TextEmitted, TurnFinished, Usage
from bot.ports import NOW
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

# today's numbers (lower them with each cut; never raise one without its reason)
ACCEPT_STATEMENTS = 1  # INSERT update_journal
CREATE_STATEMENTS = 5  # INSERT tasks (running), turns (claimed), message_links, audit, outbox
# the journal's row; the handler's read of the message's link and the creation's 5 (the
# job's read of the grants runs beside the baseline, unseen here; the turn's first transcript
# lines come after the spawn); the chat's choices are kept (SQLite), a new task's worktree is
# not looked up again
BEFORE_SPAWN_STATEMENTS = 7
BEFORE_SPAWN_COMMITS = 2  # the journal's row, the task's creation
# the turn, its task, spend and card; the acknowledgement's three reads and two writes; a read
FINISH_STATEMENTS = 10
# trips to aiosqlite's thread, the commits' included. Before bot/store/onehop.py a statement
# made 3 to 4 (cursor, execute, rows, close) and each commit was followed by the pool's rollback:
# 4 to accept, 19 to create, 26 until the spawn, 38 to finish (counted 2026-12-06)
ACCEPT_TRIPS = 1  # the journal's row rides with its commit
CREATE_TRIPS = 4  # the task (its id), its turn (its id), the acknowledgement (its row id), commit
# the journal's commit, the message's link read, the creation's 4 (the grants' read runs in a
# task of its own beside the baseline, which this count does not see; the transcript's first
# lines are written after the spawn since 2026-12-07)
BEFORE_SPAWN_TRIPS = 6
# the turn and its task (their rows), the card (its row id), the acknowledgement's 4 reads and
# the commit that runs the spend, the edit's supersede and its row
FINISH_TRIPS = 8
ENDS = {"_commit", "commit", "rollback"}  # what a transaction's end runs on the thread
# the asyncio tasks on a turn's way to its agent: polling (the journal's row), the update's
# handler (the task's creation) and the turn's job (its start); the outbox's delivery, the
# intake's periodic pass and the transcript's batches run beside it, at their own pace
PATH = {"Dispatcher._polling", "JournaledDispatcher._process_update", "AsyncScheduler._run_job"}


@dataclass
class Trips:
    """The statements run, grouped by transaction (per connection, until commit/rollback)."""

    done: list[list[str]] = field(default_factory=list)
    open: dict[int, list[str]] = field(default_factory=dict)
    path: list[str] = field(default_factory=list)  # the PATH's statements, in order
    on_path: set[int] = field(default_factory=set)  # connections that ran a PATH statement
    statements: int = 0  # of the tasks on the PATH only
    commits: int = 0  # of transactions that ran a statement of the PATH
    spawned_at: tuple[int, int] | None = None  # (statements, commits) when the agent spawned
    trips: dict[int, int] = field(default_factory=dict)  # per connection, since its last end
    path_trips: int = 0  # of the tasks on the PATH
    spawned_trips: int | None = None  # the PATH's trips when the agent spawned
    trips_done: list[list[Any]] = field(default_factory=list)  # [statements, trips] each
    ending: dict[int, list[Any]] = field(default_factory=dict)  # a connection's last ended

    def trip(self, conn: aiosqlite.Connection, fn: Any) -> None:
        """One function queued to aiosqlite's thread (by the connection ``conn``): the commit
        or rollback of the transaction it just ended, or a trip of its next one."""
        ended = self.ending.pop(id(conn), None)
        if ended is not None and getattr(fn, "__name__", "") in ENDS:
            ended[1] += 1
        else:
            self.trips[id(conn)] = self.trips.get(id(conn), 0) + 1
        task = asyncio.current_task()
        if task is not None and task.get_coro().__qualname__ in PATH:  # type: ignore[union-attr]
            self.path_trips += 1

    def execute(self, conn: Any, _c: Any, statement: str, *_rest: Any) -> None:
        task = asyncio.current_task()
        who = task.get_coro().__qualname__ if task is not None else ""  # type: ignore[union-attr]
        if who in PATH:
            self.statements += 1
            self.path.append(statement.split("\n")[0][:60])
            self.on_path.add(id(conn))
        self.open.setdefault(id(conn), []).append(" ".join(statement.split())[:80])

    def commit(self, conn: Any) -> None:
        if id(conn) in self.on_path:
            self.commits += 1
            self.path.append("COMMIT")
        self._close(conn)

    def rollback(self, conn: Any) -> None:
        self._close(conn)

    def _close(self, conn: Any) -> None:
        self.on_path.discard(id(conn))
        statements = self.open.pop(id(conn), None)
        raw = conn.connection.dbapi_connection._connection  # the aiosqlite connection
        ended = [statements or [], self.trips.pop(id(raw), 0)]
        self.ending[id(raw)] = ended  # the commit's own trip comes after this event
        if statements:
            self.done.append(statements)
            self.trips_done.append(ended)

    def transaction(self, marker: str) -> list[str]:
        found = [t for t in self.done if any(s.startswith(marker) for s in t)]
        assert len(found) == 1, (marker, self.done)
        return found[0]

    def trips_of(self, marker: str) -> int:
        found = [n for t, n in self.trips_done if any(s.startswith(marker) for s in t)]
        assert len(found) == 1, (marker, self.trips_done)
        return found[0]


class SpawnMarking(FakeEngine):
    """The scripted engine, noting how many statements ran when its agent was spawned."""

    trips: Trips | None = None

    async def run(  # type: ignore[override]
        self, spec: Any, approver: Any, steering: Any = None, ready: Any = None
    ) -> Any:
        if self.trips is not None:
            self.trips.spawned_at = (self.trips.statements, self.trips.commits)
            self.trips.spawned_trips = self.trips.path_trips
        async for event in super().run(spec, approver, steering, ready or NOW):
            yield event


SCRIPT = (
    SessionStarted("s1", "m"),
    TextEmitted("hello"),
    TurnFinished(False, "the answer", "s1", 0.01, Usage(1, 1)),
)


async def _turn(
    fake: FakeTelegram, engine: SpawnMarking, sync: sa.Engine, n: int, counted: list[Trips | None]
) -> Trips:
    trips = engine.trips = counted[0] = Trips()
    events = {"before_cursor_execute": trips.execute, "commit": trips.commit}
    events["rollback"] = trips.rollback
    for name, listener in events.items():
        sa.event.listen(sync, name, listener)
    try:
        mark = len(fake.calls)
        await fake.user_message(f"/claude mode=ask hello {n}", OWNER)
        await fake.wait_text(OWNER, "the answer", 30, after=mark)
        for _ in range(200):  # bounded: the finishing transaction commits after the card
            if any(any(s.startswith("INSERT INTO spend") for s in t) for t in trips.done):
                break
            await asyncio.sleep(0.01)
    finally:
        counted[0] = None
        for name, listener in events.items():
            sa.event.remove(sync, name, listener)
    return trips


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[Trips | None]:
    """Every function queued to an aiosqlite connection's thread, counted on the turn's Trips
    (aiosqlite's ``_execute``, through which each of its calls goes)."""
    current: list[Trips | None] = [None]
    queued = aiosqlite.Connection._execute

    async def counting(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if current[0] is not None:
            current[0].trip(self, fn)
        return await queued(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counting)
    return current


async def test_a_text_turn_makes_no_more_round_trips_than_today(
    tmp_path: Path, counted: list[Trips | None]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    engine = SpawnMarking(SCRIPT)
    async with FakeTelegram(flood_burst=1000, flood_per_s=1000) as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", work, outbox_chat_interval_s=0)
        async with running_bot(settings, {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            sync = app.store.engine.sync_engine
            pool = app.core.pool
            for n in range(2):  # the second: what every turn after the first costs
                for _ in range(500):  # bounded: the last turn's job ends (its jail ahead too)
                    if (
                        not pool.running_turns()
                        and pool.free_slots == settings.max_concurrent_turns
                    ):
                        break
                    await asyncio.sleep(0.01)
                trips = await _turn(fake, engine, sync, n, counted)
    assert len(trips.transaction("INSERT INTO update_journal")) <= ACCEPT_STATEMENTS
    created = trips.transaction("INSERT INTO tasks")
    assert len(created) <= CREATE_STATEMENTS, created
    assert trips.spawned_at is not None
    statements, commits = trips.spawned_at
    assert statements <= BEFORE_SPAWN_STATEMENTS, trips.path
    assert commits <= BEFORE_SPAWN_COMMITS, trips.path
    finished = trips.transaction("INSERT INTO spend")
    assert len(finished) <= FINISH_STATEMENTS, finished
    assert trips.trips_of("INSERT INTO update_journal") <= ACCEPT_TRIPS, trips.trips_done
    assert trips.trips_of("INSERT INTO tasks") <= CREATE_TRIPS, trips.trips_done
    assert trips.spawned_trips is not None and trips.spawned_trips <= BEFORE_SPAWN_TRIPS, trips.path
    assert trips.trips_of("INSERT INTO spend") <= FINISH_TRIPS, trips.trips_done
