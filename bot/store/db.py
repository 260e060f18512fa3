"""Engine creation and the clock the store stamps rows with.

Both databases run through SQLAlchemy's asyncio extension: PostgreSQL over asyncpg, SQLite over
aiosqlite (``sqlite+aiosqlite``), whose every connection has a thread of its own that runs its
statements, so no wait SQLite imposes (a write lock another process holds: ``detach add``) is
ever spent on the event loop's thread; SQLite's busy timeout (WRITER_WAIT_S) bounds it. A SQLite
file runs in WAL mode with synchronous=NORMAL and foreign keys on, set on every new connection.

Each statement is one trip to that thread (``bot/store/onehop.py``; SQLAlchemy's own adapter
makes three or four), and a write marked ``DEFERRED`` rides with the next one.

Results are buffered when their statement runs (``AsyncConnection.execute``), so a result may be
used after its connection went back to the pool. The pool never makes a caller wait: past its
idle connections it opens more (a file), or all share one connection (``:memory:``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeAlias

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from bot.store import onehop

Clock = Callable[[], datetime]
# ``conn.execute(statement, params, execution_options=DEFERRED)``: a write whose result (rows,
# row count, new id) nobody reads; on SQLite it runs in the next trip its connection makes to
# aiosqlite's thread (the next statement's or the commit's: ``bot/store/onehop.py``)
DEFERRED = onehop.DEFERRED
Engine: TypeAlias = AsyncEngine
Connection: TypeAlias = AsyncConnection
log = logging.getLogger(__name__)
WRITER_WAIT_S = 30.0  # SQLite's busy timeout, and this process's writers' turn-taking
IDLE_CONNECTIONS = 8  # a SQLite file's pool keeps these; past them it opens more, never waits


class Database:
    """The engine, and the transaction the current task is inside. Repositories open their
    connections here: outside ``atomic()`` each call has its own transaction; inside, every
    read and write joins the one transaction, so a state change and the outbox row that
    reports it commit together or not at all.

    On SQLite, write transactions (``begin``, ``atomic``) of this process take turns on an
    asyncio lock: SQLite has one writer at a time, and a writer it makes wait sleeps in steps
    of 1, 2, 5, 10 ms (its busy handler), which on a busy bot put milliseconds between the
    statements of a turn. Reads (``connect``) never wait. Other processes (``detach add``)
    still meet SQLite's busy timeout."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._tx: ContextVar[Connection | None] = ContextVar(f"tx{id(self)}", default=None)
        self._hooks: ContextVar[list[Callable[[], None]] | None] = ContextVar(
            f"hooks{id(self)}", default=None
        )
        self._writer = asyncio.Lock() if engine.dialect.name == "sqlite" else None
        self._writing: ContextVar[bool] = ContextVar(f"writing{id(self)}", default=False)

    @property
    def one_writer(self) -> bool:
        """Whether write transactions never overlap (SQLite): no row lock needed to order them."""
        return self._writer is not None

    @property
    def in_transaction(self) -> bool:
        """Whether the current task is inside ``atomic()`` (its reads may see its own writes,
        not yet committed)."""
        return self._tx.get() is not None

    def begin(self) -> contextlib.AbstractAsyncContextManager[Connection]:
        conn = self._tx.get()
        return _joined(conn) if conn is not None else self._write()

    def connect(self) -> contextlib.AbstractAsyncContextManager[Connection]:
        conn = self._tx.get()
        return _joined(conn) if conn is not None else self.engine.connect()

    @contextlib.asynccontextmanager
    async def atomic(self) -> AsyncIterator[None]:
        """One transaction for everything inside (a nested block joins the outer one); hooks
        added with ``after_commit`` run once it committed."""
        if self._tx.get() is not None:
            yield
            return
        hooks: list[Callable[[], None]] = []
        async with self._write() as conn:
            tx, hooked = self._tx.set(conn), self._hooks.set(hooks)
            try:
                yield
            finally:
                self._tx.reset(tx)
                self._hooks.reset(hooked)
        for hook in hooks:
            hook()

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[Connection]:
        """A write transaction, this process's writers one at a time (SQLite). A task already
        inside one (or started from one) does not wait for itself; a lock held past
        WRITER_WAIT_S is passed by, leaving it to SQLite's busy timeout."""
        lock = self._writer
        if lock is None or self._writing.get():
            async with self.engine.begin() as conn:
                yield conn
            return
        try:  # asyncio.timeout, not wait_for: a cancel never leaves the lock taken
            async with asyncio.timeout(WRITER_WAIT_S):
                await lock.acquire()
        except TimeoutError:
            log.warning("a write transaction waited %ss for another; going ahead", WRITER_WAIT_S)
            lock = None
        writing = self._writing.set(True)
        try:
            async with self.engine.begin() as conn:
                yield conn
        finally:
            self._writing.reset(writing)
            if lock is not None:
                lock.release()

    def after_commit(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` when the current transaction committed (now, outside ``atomic``)."""
        hooks = self._hooks.get()
        if hooks is None:
            hook()
        else:
            hooks.append(hook)


@contextlib.asynccontextmanager
async def _joined(conn: Connection) -> AsyncIterator[Connection]:
    yield conn


async def upsert(
    conn: Connection, table: sa.Table, key: dict[str, Any], values: dict[str, Any]
) -> None:
    """Update the row with ``key``, or insert it (SQLite and PostgreSQL alike; the caller's
    transaction makes the two one)."""
    where = [table.c[name] == value for name, value in key.items()]
    updated = await conn.execute(table.update().where(*where).values(**values))
    if updated.rowcount == 0:
        await conn.execute(table.insert().values(**key, **values))


def insert_missing(
    table: sa.Table, key: dict[str, Any], values: dict[str, Any]
) -> tuple[sa.Insert, dict[str, Any]]:
    """One statement (and its parameters) that inserts a row unless one with ``key`` exists
    (SQLite and PostgreSQL alike; no read before the write), built once per table and columns."""
    statement = _insert_missing(table, tuple(key), tuple(values))
    return statement, {f"m_{name}": value for name, value in {**key, **values}.items()}


@functools.cache
def _insert_missing(table: sa.Table, key: tuple[str, ...], values: tuple[str, ...]) -> sa.Insert:
    def bind(name: str) -> sa.BindParameter[Any]:
        return sa.bindparam(f"m_{name}", type_=table.c[name].type)

    present = sa.select(sa.literal(1)).select_from(table)
    present = present.where(*(table.c[name] == bind(name) for name in key))
    row = sa.select(*(bind(name) for name in key + values)).where(~sa.exists(present))
    return table.insert().from_select(list(key + values), row)


@functools.cache
def inserting(table: sa.Table, returning: bool = False) -> sa.Insert:
    """``INSERT INTO table`` (``RETURNING`` the row), built once; the row's values are the
    parameters it is executed with (a statement built for each call took longer to build than
    SQLite takes to run it)."""
    insert = table.insert()
    return insert.returning(table) if returning else insert


@functools.cache
def updating(table: sa.Table) -> sa.Update:
    """``UPDATE table … WHERE id = :b_id``, built once; the columns to set are the other
    parameters it is executed with."""
    return table.update().where(table.c.id == sa.bindparam("b_id"))


def utcnow() -> datetime:
    return datetime.now(UTC)


def utc(value: datetime) -> datetime:
    """A stored time that is never NULL, as an aware UTC datetime."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def aware(value: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes; every time we store is UTC."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


def make_engine(url: str) -> Engine:
    """PostgreSQL: over asyncpg. SQLite (``sqlite:///…`` or ``sqlite+aiosqlite:///…``): over
    aiosqlite, a file in WAL mode with NORMAL sync, a lock held by another process waited for
    (up to WRITER_WAIT_S) on the connection's own thread, never on the loop's."""
    if not url.startswith("sqlite"):
        return create_async_engine(url, pool_pre_ping=True)
    parsed = sa.engine.make_url(url).set(drivername="sqlite+aiosqlite")
    path = parsed.database or ":memory:"
    pooling: dict[str, Any]
    if path == ":memory:":  # one database only while one connection holds it: all share it
        pooling = {"poolclass": sa.pool.StaticPool}
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        pooling = {"pool_size": IDLE_CONNECTIONS, "max_overflow": -1}
    engine = create_async_engine(
        parsed, module=onehop.module(), connect_args={"timeout": WRITER_WAIT_S}, **pooling
    )
    sa.event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    onehop.install(engine.sync_engine)
    return engine


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
