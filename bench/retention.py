"""The database's size after 1,000 tasks with files, before and after retention's pruning.

Each task is what a busy chat leaves: a prompt naming an attachment, 30 transcript lines, an
acknowledgement and a card (delivered messages) and one delivered 20 KB file (a long answer as
``.md``: its bytes sit in the outbox row until pruning). Every task is archived, then the clock
moves past ``DETACH_RETENTION_DAYS`` (90) and the bot's ``Retention`` passes run until nothing is
left. (The files users send are in the tasks' directories, not in the database.)

    .venv/bin/python -m bench.retention             # SQLite in a temporary directory
    .venv/bin/python -m bench.retention --postgres  # also on the machine's PostgreSQL

SQLite keeps freed pages in the file (its freelist) and reuses them for new rows; the file
shrinks only with VACUUM (the store leaves ``auto_vacuum`` off, SQLite's default), so the
figures show the file, the pages in use, and the file after a VACUUM."""

from __future__ import annotations

import argparse
import asyncio
import base64
import sqlite3
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.models import NewTask, TaskKind, TaskStatus
from bot.store import Store
from bot.upkeep.retention import Pruned, Retention

TASKS = 1000
LINES = 30
FILE_BYTES = 20 * 1024


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def fill(store: Store) -> None:
    data = base64.b64encode(b"# answer\n" + b"x" * FILE_BYTES).decode()
    for n in range(TASKS):
        prompt = f"summarise this report {n}\n\nAttached by the user:\n- .detach/attachments/r.pdf"
        new = NewTask(1, 1, "claude", TaskKind.DETACH, prompt, Path("/tmp"), title=f"task {n}")
        task, turn = await store.tasks.create(new, f"task-{n}")
        events = [
            ("text", {"text": f"step {i}: " + "reading the report " * 8}) for i in range(LINES)
        ]
        await store.transcript.append(task.id, turn.id, events)
        for kind, payload, op in (
            ("command", {"text": f"#{task.id} task · queued"}, "send"),
            ("result", {"text": "✅ done · " + "the answer " * 60}, "send"),
            (
                "result",
                {"data": data, "filename": "answer.md", "caption": "", "silent": False},
                "document",
            ),
        ):
            row = await store.outbox.add(1, op, payload, task.id, kind)
            await store.outbox.sent(row, row)
        await store.tasks.set_status(task.id, TaskStatus.DONE)
    await store.tasks.archive_finished(1)


class Timed:
    """The store's retention repository, timing each batch (the time the loop is held)."""

    def __init__(self, repo: Any) -> None:
        self.repo = repo
        self.longest_s = 0.0
        self.by_name: dict[str, float] = {}

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.repo, name)

        async def timed(*args: Any) -> Any:
            began = time.perf_counter()
            try:
                return await method(*args)
            finally:
                took = time.perf_counter() - began
                self.longest_s = max(self.longest_s, took)
                self.by_name[name] = max(self.by_name.get(name, 0.0), took)

        return timed


async def prune_all(store: Store, clock: Clock) -> tuple[Pruned, float, int]:
    """Passes until nothing is left: the total, the longest batch (s), the passes."""
    timed = Timed(store.retention)
    store.retention = timed  # type: ignore[assignment]
    retention = Retention(store, 90, clock=clock)
    total, passes = Pruned(), 0
    while True:
        pruned = await retention.prune_once()
        passes += 1
        if pruned == Pruned():
            store.retention = timed.repo
            print(
                "  longest batch by kind:",
                {k: f"{v * 1000:.0f} ms" for k, v in timed.by_name.items()},
            )
            return total, timed.longest_s, passes
        total = Pruned(*(a + b for a, b in zip(_t(total), _t(pruned), strict=True)))


def _t(p: Pruned) -> tuple[int, int, int, int, int, int]:
    return (p.files, p.outbox, p.transcript, p.held, p.drafts, p.holds)


def sqlite_size(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages, free, size = (
            conn.execute(f"PRAGMA {p}").fetchone()[0]
            for p in ("page_count", "freelist_count", "page_size")
        )
    used = (pages - free) * size
    return f"file {path.stat().st_size / 1e6:.1f} MB, pages in use {used / 1e6:.1f} MB"


async def on_sqlite() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "detach.sqlite"
        clock = Clock()
        store = await Store.open(f"sqlite+aiosqlite:///{path}", clock)
        await fill(store)
        print(f"SQLite, {TASKS} tasks: {sqlite_size(path)}")
        total, _, _ = await prune_all(store, clock)
        print(f"  the same day: {total}: {sqlite_size(path)}")
        clock.now += timedelta(days=91)
        total, longest, passes = await prune_all(store, clock)
        print(f"  pruned {total} in {passes} passes (longest batch {longest * 1000:.0f} ms)")
        print(f"  after pruning: {sqlite_size(path)}")
        await fill(store)  # the next 1,000 tasks reuse the freed pages
        print(f"  {TASKS} more tasks: {sqlite_size(path)}")
        clock.now += timedelta(days=91)
        await prune_all(store, clock)
        await store.close()
        with sqlite3.connect(path) as conn:
            conn.execute("VACUUM")
        print(f"  after VACUUM: {sqlite_size(path)}")


async def on_postgres() -> None:
    import asyncpg  # type: ignore[import-untyped]

    admin = await asyncpg.connect("postgresql://postgres@127.0.0.1:5432/postgres")
    name = f"detach_bench_{int(time.time())}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        clock = Clock()
        store = await Store.open(f"postgresql+asyncpg://postgres@127.0.0.1:5432/{name}", clock)
        db = await asyncpg.connect(f"postgresql://postgres@127.0.0.1:5432/{name}")

        async def size() -> str:
            found = await db.fetchval("SELECT pg_database_size(current_database())")
            return f"{found / 1e6:.1f} MB"

        await fill(store)
        await db.execute("VACUUM")
        print(f"PostgreSQL, {TASKS} tasks: database {await size()}")
        total, _, _ = await prune_all(store, clock)
        await db.execute("VACUUM")
        print(f"  the same day: {total}; after (auto)VACUUM: {await size()}")
        clock.now += timedelta(days=91)
        total, longest, passes = await prune_all(store, clock)
        await store.close()
        print(f"  pruned {total} in {passes} passes (longest batch {longest * 1000:.0f} ms)")
        await db.execute("VACUUM")
        print(f"  after pruning and (auto)VACUUM: {await size()}")
        await db.execute("VACUUM FULL")
        print(f"  after VACUUM FULL: {await size()}")
        await db.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()
    asyncio.run(on_sqlite())
    if args.postgres:
        asyncio.run(on_postgres())


if __name__ == "__main__":
    main()
