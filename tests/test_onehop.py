"""bot/store/onehop.py: a statement is one trip to aiosqlite's thread, a deferred write rides
with the next trip and keeps its order, a rollback drops it, its error is not lost, and a
transaction's end makes no trip when SQLite has nothing to end. On a real SQLite file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiosqlite
import pytest
import sqlalchemy as sa

from bot.store.db import DEFERRED, Engine, make_engine

INSERT = sa.text("INSERT INTO t (a) VALUES (:a)")
ALL = sa.text("SELECT a FROM t ORDER BY rowid")


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    async with engine.begin() as conn:
        await conn.execute(sa.text("CREATE TABLE t (a INTEGER UNIQUE)"))
    yield engine
    await engine.dispose()


@pytest.fixture
def trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of every function queued to an aiosqlite connection's thread."""
    seen: list[str] = []
    queued = aiosqlite.Connection._execute

    async def counting(self: aiosqlite.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(getattr(fn, "__name__", repr(fn)))
        return await queued(self, fn, *args, **kwargs)

    monkeypatch.setattr(aiosqlite.Connection, "_execute", counting)
    return seen


async def _all(engine: Engine) -> list[int]:
    async with engine.connect() as conn:
        return [row[0] for row in await conn.execute(ALL)]


async def test_a_statement_is_one_trip_and_a_read_ends_without_one(
    engine: Engine, trips: list[str]
) -> None:
    async with engine.connect() as conn:  # a connection of the pool, opened before counting
        await conn.execute(sa.text("SELECT 1"))
    trips.clear()
    async with engine.connect() as conn:
        assert (await conn.execute(sa.text("SELECT 41 + 1"))).scalar() == 42
    assert trips == ["_statement"]  # no cursor of its own, no rollback of nothing
    trips.clear()
    async with engine.begin() as conn:
        result = await conn.execute(INSERT, {"a": 1})
        assert result.rowcount == 1
    assert trips == ["_statement", "_commit"]  # and no rollback after the commit


async def test_deferred_writes_ride_with_the_commit_in_order(
    engine: Engine, trips: list[str]
) -> None:
    async with engine.connect() as conn:
        await conn.execute(sa.text("SELECT 1"))
    trips.clear()
    async with engine.begin() as conn:
        for a in (3, 1, 2):
            await conn.execute(INSERT, {"a": a}, execution_options=DEFERRED)
        assert trips == []  # nothing has gone to the thread yet
    assert trips == ["_commit"]
    assert await _all(engine) == [3, 1, 2]


async def test_a_read_after_a_deferred_write_sees_it(engine: Engine, trips: list[str]) -> None:
    async with engine.begin() as conn:
        await conn.execute(INSERT, {"a": 7}, execution_options=DEFERRED)
        trips.clear()
        assert [row[0] for row in await conn.execute(ALL)] == [7]
        assert trips == ["_statement"]  # the write and the read in one trip


async def test_a_rollback_drops_deferred_writes(engine: Engine) -> None:
    async with engine.begin() as conn:
        await conn.execute(INSERT, {"a": 1})
    async with engine.connect() as conn:
        await conn.execute(INSERT, {"a": 5}, execution_options=DEFERRED)
        await conn.rollback()
    with pytest.raises(RuntimeError):
        async with engine.begin() as conn:
            await conn.execute(INSERT, {"a": 6}, execution_options=DEFERRED)
            raise RuntimeError("the caller's transaction fails")
    assert await _all(engine) == [1]


async def test_a_deferred_writes_error_fails_its_transaction(engine: Engine) -> None:
    async with engine.begin() as conn:
        await conn.execute(INSERT, {"a": 1})
    with pytest.raises(sa.exc.IntegrityError):
        async with engine.begin() as conn:
            await conn.execute(INSERT, {"a": 2})
            await conn.execute(INSERT, {"a": 1}, execution_options=DEFERRED)  # a duplicate
    assert await _all(engine) == [1]  # the 2 before it is rolled back with it
    with pytest.raises(sa.exc.IntegrityError):
        async with engine.begin() as conn:
            await conn.execute(INSERT, {"a": 1}, execution_options=DEFERRED)
            await conn.execute(ALL)  # the next trip runs it, and says so
    async with engine.begin() as conn:  # the connection is usable again
        await conn.execute(INSERT, {"a": 3}, execution_options=DEFERRED)
    assert await _all(engine) == [1, 3]
