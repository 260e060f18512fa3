"""SQLite over aiosqlite, one round trip to the connection's thread per statement (issue #54).

SQLAlchemy's aiosqlite adapter makes three or four trips to aiosqlite's thread for each
statement (open a cursor, execute, fetch its rows, close it): each an asyncio future resolved
from another thread, about 0.07 ms idle and far more on a busy loop. Here a statement is one
function run on that same thread by aiosqlite's own queue (``Connection._execute``, the call
aiosqlite's public methods make): cursor, execute, rows and close at once. Still aiosqlite,
still off the event loop's thread; the SQL, its parameters and SQLAlchemy's results are the
same.

A write whose result nobody reads (no rows, no row count, no new id) may be *deferred*
(``DEFERRED``): it is kept in order on the connection and run in the trip of the next
statement, or of the commit, that needs the thread anyway, so a transaction of such writes
costs one trip (the commit's). Every statement still runs in the order it was issued, in the
same transaction; a commit or rollback with nothing to end makes no trip; a deferred write's
error surfaces at that next statement or commit (which
the caller's transaction turns into its rollback), and a rollback drops what was not run.
"""

from __future__ import annotations

import collections
import sqlite3
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.sqlite.aiosqlite import (
    AsyncAdapt_aiosqlite_connection,
    AsyncAdapt_aiosqlite_cursor,
    AsyncAdapt_aiosqlite_dbapi,
)
from sqlalchemy.util import EMPTY_DICT
from sqlalchemy.util.concurrency import await_

# ``conn.execute(statement, params, execution_options=DEFERRED)``: a write whose result is not read
DEFERRED = {"detach_deferred": True}
Pending = list[tuple[str, Any]]


def _flush(conn: sqlite3.Connection, pending: Pending) -> None:
    """On the connection's thread: the deferred writes, in order (dropped once tried)."""
    try:
        for statement, parameters in pending:
            conn.execute(statement, parameters)
    finally:
        pending.clear()


def _statement(
    conn: sqlite3.Connection, pending: Pending, statement: str, parameters: Any
) -> tuple[Any, list[Any], int, int | None]:
    """On the connection's thread: the writes deferred so far, then one statement, its rows
    read and its cursor closed."""
    _flush(conn, pending)
    cursor = conn.cursor()
    try:
        cursor.execute(statement, () if parameters is None else parameters)
        description = cursor.description
        rows = cursor.fetchall() if description else []
        return description, rows, cursor.rowcount, cursor.lastrowid
    finally:
        cursor.close()


def _many(conn: sqlite3.Connection, pending: Pending, statement: str, rows: Any) -> int:
    _flush(conn, pending)
    cursor = conn.cursor()
    try:
        cursor.executemany(statement, rows)
        return int(cursor.rowcount)
    finally:
        cursor.close()


def _commit(conn: sqlite3.Connection, pending: Pending) -> None:
    _flush(conn, pending)
    conn.commit()


async def _done() -> None:
    return None


class OneHopCursor(AsyncAdapt_aiosqlite_cursor):
    """A DBAPI cursor for SQLAlchemy whose statement is one trip; it holds no aiosqlite cursor
    (opening and closing one were two trips of their own)."""

    __slots__ = ("_one", "_description", "_rowcount", "_lastrowid")

    def __init__(self, adapt_connection: OneHopConnection) -> None:  # no trip
        self._adapt_connection = self._one = adapt_connection
        self._connection = adapt_connection._connection
        self._cursor = None  # type: ignore[assignment]
        self._soft_closed_memoized = EMPTY_DICT
        self._rows = collections.deque()
        self._description: Any = None
        self._rowcount = -1
        self._lastrowid: int | None = None

    @property
    def description(self) -> Any:
        return self._description

    @property
    def rowcount(self) -> int:
        return self._rowcount

    @property
    def lastrowid(self) -> int:
        return self._lastrowid  # type: ignore[return-value]

    @property
    def arraysize(self) -> int:
        return 1

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        pass

    async def _async_soft_close(self) -> None:
        pass  # nothing is open on the thread

    def close(self) -> None:
        self._rows.clear()

    def defer(self, statement: str, parameters: Any) -> None:
        """Keep a write for the connection's next trip (``DEFERRED``). SQLAlchemy's asyncio
        extension requires every statement to await: an awaitable that is already done is
        awaited (a switch of greenlets, no trip and no turn of the event loop)."""
        self._one.pending.append((statement, parameters))
        self._description, self._rowcount, self._lastrowid = None, -1, None
        await_(_done())

    async def _execute_async(self, operation: Any, parameters: Any) -> Any:
        adapted = self._one
        async with adapted._execute_mutex:
            raw = adapted._connection
            found = await raw._execute(
                _statement, raw._conn, adapted.pending, operation, parameters
            )
        self._description, rows, self._rowcount, self._lastrowid = found
        self._rows = collections.deque(rows)
        return None

    async def _executemany_async(self, operation: Any, seq_of_parameters: Sequence[Any]) -> Any:
        adapted = self._one
        async with adapted._execute_mutex:
            raw = adapted._connection
            self._rowcount = await raw._execute(
                _many, raw._conn, adapted.pending, operation, seq_of_parameters
            )
        self._description = None
        return None


class OneHopConnection(AsyncAdapt_aiosqlite_connection):
    """aiosqlite's connection for SQLAlchemy with one-trip statements; its commit runs the
    deferred writes and commits in one trip, its rollback drops them."""

    __slots__ = ("pending",)

    def __init__(self, dbapi: Any, connection: Any) -> None:
        super().__init__(dbapi, connection)
        self.pending: Pending = []

    def cursor(self, server_side: bool = False) -> Any:
        if not server_side:
            return OneHopCursor(self)
        if self.pending:  # a streamed read sees the writes before it, as any statement does
            await_(self._connection._execute(_flush, self._connection._conn, self.pending))
        return super().cursor(server_side)

    def commit(self) -> None:
        if not self._connection._connection or not (self.pending or self._open()):
            return  # SQLite's own commit would do nothing: no trip for it
        try:
            await_(self._connection._execute(_commit, self._connection._conn, self.pending))
        except Exception as error:
            self._handle_exception(error)

    def rollback(self) -> None:
        self.pending.clear()
        if self._connection._connection and self._open():
            super().rollback()

    def _open(self) -> bool:
        """Whether SQLite holds a transaction open on this connection (read on this thread:
        no statement of the connection is running meanwhile). A commit or rollback without
        one does nothing in sqlite3, so it costs no trip: the pool's rollback of every
        connection coming back after its commit, and every read's end."""
        return bool(self._connection.in_transaction)


class OneHopDBAPI(AsyncAdapt_aiosqlite_dbapi):
    """SQLAlchemy's aiosqlite module, handing out ``OneHopConnection``s."""

    def connect(self, *arg: Any, **kw: Any) -> OneHopConnection:
        adapted = super().connect(*arg, **kw)
        return OneHopConnection(self, adapted._connection)


def module() -> OneHopDBAPI:
    """The DBAPI module for ``create_async_engine(module=...)``."""
    import aiosqlite

    return OneHopDBAPI(aiosqlite, sqlite3)


def install(engine: sa.Engine) -> None:
    """Let ``DEFERRED`` statements of ``engine`` (its sync face) wait for the next trip."""
    sa.event.listen(engine, "do_execute", _deferred, retval=True)


def _deferred(cursor: Any, statement: str, parameters: Any, context: Any) -> bool | None:
    if isinstance(cursor, OneHopCursor) and context.execution_options.get("detach_deferred"):
        cursor.defer(statement, parameters)
        return True
    return None
