"""SQLite on the event loop's own thread, for SQLAlchemy's aiosqlite dialect.

aiosqlite runs every call on a thread of its own: each statement is five or more hops between
threads, about 0.7 ms apiece on a busy two-core machine, where SQLite itself needs 20-50 µs for
the bot's small statements (WAL, synchronous=NORMAL: a commit does not fsync). A turn makes about
twenty; that was most of what the bot added to an agent's time. This module gives SQLAlchemy an
object with aiosqlite's interface that runs each call at once on the calling thread.

The one wait SQLite can impose, a lock held by another process's writer (``detach add``), never
blocks the loop: the connection's busy timeout is zero, and a statement SQLite answers
SQLITE_BUSY is retried after an asyncio sleep, for up to BUSY_WAIT_S. (A transaction that read
an old snapshot and then meets a newer writer gets SQLITE_BUSY_SNAPSHOT, which no wait cures: it
is raised at once, as SQLite's own busy handler would leave it.)
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

BUSY_WAIT_S = 30.0
RETRY_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)  # then every 50 ms, like SQLite's own
BUSY_CODES = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
T = TypeVar("T")


async def _patiently(call: Callable[..., T], *args: Any) -> T:
    """``call(*args)``, retried after short sleeps while another process holds the lock."""
    deadline = time.monotonic() + BUSY_WAIT_S
    attempt = 0
    while True:
        try:
            return call(*args)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) not in BUSY_CODES:
                raise
            if time.monotonic() >= deadline:
                raise
        await asyncio.sleep(RETRY_S[min(attempt, len(RETRY_S) - 1)])
        attempt += 1


class InlineCursor:
    """aiosqlite's Cursor, run inline."""

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ()) -> Any:
        return await _patiently(self._cursor.execute, sql, parameters)

    async def executemany(self, sql: str, rows: Iterable[Any]) -> Any:
        return await _patiently(self._cursor.executemany, sql, list(rows))

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(size if size is not None else self._cursor.arraysize)

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()


class _RunNow:
    """Stands in for aiosqlite's queue of calls, which SQLAlchemy uses to set the isolation
    level: the call runs at once."""

    @staticmethod
    def put_nowait(item: tuple[asyncio.Future[Any], Callable[[], Any]]) -> None:
        future, function = item
        try:
            future.set_result(function())
        except Exception as exc:  # handed to the waiting caller, as aiosqlite does
            future.set_exception(exc)


class InlineConnection:
    """aiosqlite's Connection, run inline (the attributes SQLAlchemy's dialect reads included)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._connection: sqlite3.Connection | None = conn
        self._tx = _RunNow()

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    def cursor(self) -> InlineCursor:
        return InlineCursor(self._conn.cursor())

    async def execute(self, sql: str, parameters: Sequence[Any] | dict[str, Any] = ()) -> Any:
        return await self.cursor().execute(sql, parameters)

    async def commit(self) -> None:
        await _patiently(self._conn.commit)

    async def rollback(self) -> None:
        self._conn.rollback()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)

    async def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        if self._connection is not None:
            self._connection = None
            self._conn.close()


def connector(path: str) -> Callable[[], Any]:
    """The ``async_creator`` of an engine on the SQLite file ``path``."""

    async def connect() -> InlineConnection:
        # its calls all run on the loop's thread; SQLAlchemy's pool may close it from another
        return InlineConnection(sqlite3.connect(path, timeout=0, check_same_thread=False))

    return connect
