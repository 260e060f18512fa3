"""SQLite for the store: SQLAlchemy's own synchronous engine, run on the event loop's thread
behind the few awaitable methods the store calls (those of ``AsyncEngine`` and
``AsyncConnection``: ``connect``, ``begin``, ``dispose``; ``execute``, ``exec_driver_sql``,
``run_sync``, ``commit``, ``rollback``, ``close``).

Why not SQLAlchemy's asyncio extension over aiosqlite, which the store used before: aiosqlite
runs every call on a thread of its own (five or more hops between threads per statement, about
0.7 ms apiece on a busy two-core machine, where SQLite itself needs 20-50 µs for the bot's small
statements: WAL, synchronous=NORMAL, a commit does not fsync), and the extension imports
SQLAlchemy's ORM and greenlet, 6 MB of the idle bot for nothing it uses. A statement that takes
microseconds needs no thread; it runs at once. PostgreSQL keeps the asyncio extension (asyncpg).

The one wait SQLite can impose, a write lock held by another process (``detach add``), never
blocks the loop: the connection's busy timeout is zero, and a statement or commit SQLite answers
SQLITE_BUSY is tried again after an asyncio sleep, for up to BUSY_WAIT_S. (A transaction that
read an old snapshot and then meets a newer writer gets SQLITE_BUSY_SNAPSHOT, which no wait
cures: it is raised at once, as SQLite's own busy handler would leave it.)

Results are read whole when their statement runs (as the asyncio extension did), so a result
may be used after its connection went back to the pool, and no read keeps a snapshot open. The
pool never blocks the loop: past its idle connections it opens more (``max_overflow=-1``).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, TypeVar, TypeVarTuple, overload

import sqlalchemy as sa
from sqlalchemy.engine import CursorResult
from sqlalchemy.sql.base import Executable

if TYPE_CHECKING:
    from sqlalchemy.sql.selectable import TypedReturnsRows

BUSY_WAIT_S = 30.0
RETRY_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)  # then every 50 ms, like SQLite's own
BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
IDLE_CONNECTIONS = 8
T = TypeVar("T")
Ts = TypeVarTuple("Ts")


def _busy(exc: BaseException) -> bool:
    orig = exc.orig if isinstance(exc, sa.exc.DBAPIError) else exc
    return getattr(orig, "sqlite_errorcode", None) in BUSY_CODES


async def _patiently(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, tried again after short sleeps while another process holds the lock."""
    deadline = time.monotonic() + BUSY_WAIT_S
    attempt = 0
    while True:
        try:
            return call(*args)
        except (sa.exc.OperationalError, sqlite3.OperationalError) as exc:
            if not _busy(exc) or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
        attempt += 1


class _Cursor(sqlite3.Cursor):
    """A cursor that reads its rows whole when its statement runs."""

    _rows: collections.deque[Any] = collections.deque()

    def execute(self, sql: str, parameters: Any = (), /) -> _Cursor:
        super().execute(sql, parameters)
        self._rows = collections.deque(super().fetchall() if self.description else ())
        return self

    def executemany(self, sql: str, seq_of_parameters: Any, /) -> _Cursor:
        super().executemany(sql, seq_of_parameters)
        self._rows = collections.deque()
        return self

    def fetchone(self) -> Any:
        return self._rows.popleft() if self._rows else None

    def fetchmany(self, size: int | None = None) -> list[Any]:
        count = min(self.arraysize if size is None else size, len(self._rows))
        return [self._rows.popleft() for _ in range(count)]

    def fetchall(self) -> list[Any]:
        rows, self._rows = list(self._rows), collections.deque()
        return rows


class _Connection(sqlite3.Connection):
    def cursor(self, factory: Any = _Cursor) -> Any:  # type: ignore[override]
        return super().cursor(factory)


class SqliteConnection:
    """One pooled connection, with ``AsyncConnection``'s methods the store uses."""

    def __init__(self, conn: sa.Connection) -> None:
        self.sync = conn

    @overload
    async def execute(
        self, statement: TypedReturnsRows[*Ts], parameters: Any = None
    ) -> CursorResult[*Ts]: ...

    @overload
    async def execute(
        self, statement: Executable, parameters: Any = None
    ) -> CursorResult[*tuple[Any, ...]]: ...

    async def execute(
        self, statement: Executable, parameters: Any = None
    ) -> CursorResult[*tuple[Any, ...]]:
        return await _patiently(self.sync.execute, statement, parameters)

    async def exec_driver_sql(self, sql: str, parameters: Any = None) -> CursorResult[Any]:
        return await _patiently(self.sync.exec_driver_sql, sql, parameters)

    async def run_sync(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return fn(self.sync, *args, **kwargs)

    async def commit(self) -> None:
        dbapi = self.sync.connection.dbapi_connection
        if dbapi is not None:
            await _patiently(dbapi.commit)  # the wait, if any; SQLAlchemy's commit then ends it
        self.sync.commit()

    async def rollback(self) -> None:
        self.sync.rollback()

    async def close(self) -> None:
        self.sync.close()


class SqliteEngine:
    """``AsyncEngine``'s methods the store uses, over a synchronous engine on one file."""

    def __init__(self, sync_engine: sa.Engine) -> None:
        self.sync_engine = sync_engine

    @property
    def dialect(self) -> sa.Dialect:
        return self.sync_engine.dialect

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[SqliteConnection]:
        conn = SqliteConnection(self.sync_engine.connect())
        try:
            yield conn
        finally:
            conn.sync.close()  # back to the pool, rolled back if a transaction was left open

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[SqliteConnection]:
        """A transaction, committed when the block ends, rolled back if it raises."""
        async with self.connect() as conn:
            yield conn
            await conn.commit()

    async def dispose(self) -> None:
        self.sync_engine.dispose()


def sqlite_engine(path: str) -> SqliteEngine:
    """An engine on the SQLite file ``path`` (``:memory:``: one shared in-memory database)."""
    memory = path == ":memory:"

    def connect() -> sqlite3.Connection:
        # timeout 0: a lock is waited for by _patiently, never inside SQLite; every call runs on
        # the loop's thread, but the pool may close a connection from another
        return sqlite3.connect(path, timeout=0, check_same_thread=False, factory=_Connection)

    pooling: dict[str, Any] = (
        {"poolclass": sa.pool.StaticPool}
        if memory
        else {"poolclass": sa.pool.QueuePool, "pool_size": IDLE_CONNECTIONS, "max_overflow": -1}
    )
    return SqliteEngine(sa.create_engine("sqlite://", creator=connect, **pooling))
