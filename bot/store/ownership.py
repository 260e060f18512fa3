"""One process per database and role: the bot (role ``all`` or ``front``) and each worker name
hold a lock for their whole life, taken before anything else touches the database or the
agents (the start-up sweep of what a crashed run left would stop a live one's agents).

- SQLite: ``fcntl.flock`` on ``<database>.lock`` beside the database file; the file says who
  holds it (pid, host, since). The kernel drops the lock when the process dies, however.
- PostgreSQL: a session advisory lock (``pg_try_advisory_lock``) keyed on the role, held on a
  connection of its own that lives as long as the process; its ``application_name`` says who
  holds it. The server drops the lock when that connection ends (the process died: its socket
  closed); a holder that died a moment ago is waited for, at most HOLDER_GONE_S.

A second process refuses with ``AlreadyRunning``, naming the one that runs."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bot.errors import AlreadyRunning
from bot.models import Phrase, ProcessRole

log = logging.getLogger(__name__)
HOLDER_GONE_S = 5.0  # PostgreSQL: how long a lock whose holder just died may take to go
_RETRY_S = 0.25
_HOLDER_SQL = """
SELECT a.application_name, a.backend_start, host(a.client_addr)
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid
"""


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a lock: its pid and host (when known), and since when."""

    pid: int | None
    host: str
    since: datetime | None

    def describe(self) -> str:
        pid = f"pid {self.pid}" if self.pid else "a process"
        since = f" since {self.since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if self.since else ""
        return f"{pid} on {self.host or 'an unknown host'}{since}"

    def words(self) -> Phrase:
        """``describe`` in any language."""
        since = f"{self.since.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC" if self.since else "?"
        return Phrase(
            "ownership.holder", {"pid": self.pid or "?", "host": self.host or "?", "since": since}
        )


@dataclass(frozen=True, slots=True)
class Role:
    """What holds a lock, in the log's words (``text``) and in any language (``words``)."""

    text: str
    words: Phrase


def owner(role: ProcessRole, name: str, host: str) -> tuple[str, Role]:
    """The key of a process's lock, and what it is in words: one bot per database (``all`` or
    ``front``: either polls Telegram and fires the schedules), one worker per name and host."""
    if role is ProcessRole.WORKER:
        words = Phrase("ownership.worker", {"name": name, "host": host})
        return f"worker {host} {name}", Role(f"worker {name} on {host}", words)
    return "bot", Role("a bot on this database", Phrase("ownership.bot"))


def _refusal(what: Role, holder: Holder) -> AlreadyRunning:
    said = Phrase("ownership.running", {"what": what.words, "holder": holder.words()})
    return AlreadyRunning(what.text, holder.describe(), said)


def this_process() -> Holder:
    return Holder(os.getpid(), socket.gethostname(), datetime.now(UTC))


@contextlib.asynccontextmanager
async def owned(url: str, key: str, what: Role) -> AsyncIterator[None]:
    """Hold the lock of ``key`` on the database at ``url`` (a SQLAlchemy URL) while inside;
    ``AlreadyRunning`` (naming ``what`` and its holder) when another process holds it. An
    in-memory SQLite database has nothing to share and takes no lock."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            yield
            return
        fd = lock_file(Path(parsed.database + ".lock"), what)
        try:
            yield
        finally:
            os.close(fd)  # the lock goes with the descriptor
        return
    conn = await advisory_lock(parsed, key, what)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):  # deliberate: the server drops it anyway
            await asyncio.wait_for(conn.close(), 10)


def lock_file(path: Path, what: Role) -> int:
    """The descriptor holding ``path``'s lock (not inherited by children), with this process
    written in it; ``AlreadyRunning`` when another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _read_holder(fd)
        os.close(fd)
        raise _refusal(what, holder) from None
    me = this_process()
    record = {"pid": me.pid, "host": me.host, "since": me.since.isoformat() if me.since else ""}
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(record).encode(), 0)
    log.info("holding %s", path)
    return fd


def _read_holder(fd: int) -> Holder:
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
        since = datetime.fromisoformat(record["since"]) if record.get("since") else None
        return Holder(int(record.get("pid") or 0) or None, str(record.get("host", "")), since)
    except (ValueError, TypeError, KeyError, OSError):  # written half (it starts this instant)
        return Holder(None, "", None)


def advisory_key(key: str) -> int:
    """A signed 64-bit advisory lock key for ``key``, the same in every process."""
    digest = hashlib.sha256(f"detach:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def advisory_lock(url: sa.engine.URL, key: str, what: Role) -> Any:
    """A connection of its own holding the advisory lock of ``key``; waits at most
    HOLDER_GONE_S for a holder that is going, then ``AlreadyRunning``."""
    import asyncpg  # scale-out only (the `postgres` extra)

    me = this_process()
    dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"detach {me.pid} {me.host}"[:63]  # PostgreSQL keeps 63 bytes of it
    conn = await asyncpg.connect(dsn, timeout=10, server_settings={"application_name": name})
    lock_id = advisory_key(key)
    deadline = asyncio.get_running_loop().time() + HOLDER_GONE_S
    try:
        while not await conn.fetchval("SELECT pg_try_advisory_lock($1)", lock_id):
            if asyncio.get_running_loop().time() >= deadline:
                raise _refusal(what, await _advisory_holder(conn, lock_id))
            await asyncio.sleep(_RETRY_S)
    except BaseException:
        await conn.close()
        raise
    log.info("holding the advisory lock of %s", what.text)
    return conn


async def _advisory_holder(conn: Any, lock_id: int) -> Holder:
    unsigned = lock_id & 0xFFFFFFFFFFFFFFFF
    row = await conn.fetchrow(_HOLDER_SQL, unsigned >> 32, unsigned & 0xFFFFFFFF)
    if row is None:
        return Holder(None, "", None)
    name, since, address = row
    parts = (name or "").split(" ", 2)
    if len(parts) == 3 and parts[0] == "detach" and parts[1].isdigit():
        return Holder(int(parts[1]), parts[2], since)
    return Holder(None, address or "", since)
