"""Scale-out workers on the machine's PostgreSQL: how fast one starts and how light it idles,
and what each costs the database, so the README can say how many one PostgreSQL carries.

- start: spawn of `python -m bot worker` to its "ready" line (engines probed, lease taken,
  claiming), and its RSS once idle;
- idle cost: database transactions per second and connections per idle worker (heartbeat,
  the claim poll, the LISTEN connection), with 1 and with 12 workers;
- load: 400 turns queued at once (a stand-in claude that answers at once), claimed by 4
  workers of 8 slots: turns per second through the shared queue, each claimed once, and the
  most database connections the workers held.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import psutil
import pytest
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.models import NewTask, TaskKind, TaskStatus  # noqa: E402
from bot.store import Store  # noqa: E402
from tests.support import fake_claude  # noqa: E402
from tests.support.postgres import postgres_database  # noqa: E402
from tests.support.workers import Worker  # noqa: E402

TURNS = int(os.environ.get("BENCH_TURNS", "400"))
IDLE_S = 10.0


def env_for(url: str, home: Path, claude: str, **extra: str) -> dict[str, str]:
    """A worker's environment: its own home and data, the tasks' directory the bench's root."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "PYTHONPATH": str(ROOT),
        "DETACH_DATABASE_URL": url,
        "DETACH_DATA_DIR": str(home / "data"),
        "DETACH_CLAUDE_BIN": claude,
        "DETACH_WORKDIR": str(home.parent),
        **extra,
    }


async def start(workers: list[Worker]) -> list[float]:
    took = []
    for worker in workers:
        began = time.monotonic()
        await worker.start()
        await worker.ready(60)
        took.append(time.monotonic() - began)
    return took


async def database_load(dsn: str, seconds: float) -> tuple[float, int]:
    """Transactions per second on the database over ``seconds``, and its connections."""
    conn = await asyncpg.connect(dsn)
    try:
        query = "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1"
        name = dsn.rsplit("/", 1)[1]
        before = await conn.fetchval(query, name)
        await asyncio.sleep(seconds)
        after = await conn.fetchval(query, name)
        connections = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
            name,
        )
        return (after - before) / seconds, int(connections)
    finally:
        await conn.close()


async def queue_turns(store: Store, count: int, workdir: Path) -> None:
    for n in range(count):
        _, turn = await store.tasks.create(
            NewTask(
                owner_id=1,
                chat_id=1,
                engine="claude",
                kind=TaskKind.DETACH,
                prompt=f"bench {n}",
                cwd=workdir,
            ),
            f"bench-{n}",
        )
        await store.claims.mark_submitted(turn.id)
    await store.claims.announce()


async def idle(url: str, dsn: str, home: Path, claude: str, count: int) -> None:
    workers = [
        Worker(f"i{n}", env_for(url, home / f"i{n}", claude), home / f"i{n}.log")
        for n in range(count)
    ]
    for worker in workers:
        (home / worker.name).mkdir()
    took = await start(workers)
    await asyncio.sleep(3)
    rss = [psutil.Process(w.proc.pid).memory_info().rss / 2**20 for w in workers if w.proc]
    tps, connections = await database_load(dsn, IDLE_S)
    print(
        f"{count} idle worker(s): start {min(took):.2f}-{max(took):.2f} s, RSS "
        f"{min(rss):.0f}-{max(rss):.0f} MB each; database {tps / count:.2f} transactions/s "
        f"and {connections / count:.1f} connections per worker"
    )
    for worker in workers:
        await worker.stop()


async def load(url: str, dsn: str, home: Path, claude: str) -> None:
    store = await Store.open(url)
    workers = [
        Worker(
            f"l{n}",
            env_for(url, home / f"l{n}", claude, DETACH_MAX_CONCURRENT_TURNS="8"),
            home / f"l{n}.log",
        )
        for n in range(4)
    ]
    for worker in workers:
        (home / worker.name).mkdir()
    await start(workers)
    admin = await asyncpg.connect(dsn)
    name = dsn.rsplit("/", 1)[1]
    most = 0
    began = time.monotonic()
    await queue_turns(store, TURNS, home)
    try:
        while True:
            tasks = await store.tasks.list_for(1, limit=TURNS + 10)
            most = max(
                most,
                int(
                    await admin.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", name
                    )
                ),
            )
            if all(not t.status.active for t in tasks):
                break
            await asyncio.sleep(0.2)
        took = time.monotonic() - began
        done = sum(t.status is TaskStatus.DONE for t in tasks)
        async with store.engine.connect() as conn:
            runs = (await conn.execute(sa.text("SELECT max(runs) FROM turns"))).scalar()
        print(
            f"{TURNS} turns through 4 workers x 8 slots: {TURNS / took:.0f} turns/s "
            f"(stand-in agent; {done} done), each claimed once: {runs == 1}; at most "
            f"{most - 1} database connections held by the workers"
        )
    finally:
        await admin.close()
        for worker in workers:
            await worker.stop()
        await store.close()


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        claude = fake_claude.script(home)
        try:
            database = postgres_database()
            url = await database.__aenter__()
        except pytest.skip.Exception as exc:  # no PostgreSQL here
            print(f"workers: not measured ({exc})")
            return
        try:
            dsn = url.replace("postgresql+asyncpg://", "postgresql://")
            await (await Store.open(url)).close()  # the schema, once, before the workers
            await idle(url, dsn, home, claude, 1)
            (home / "many").mkdir()
            await idle(url, dsn, home / "many", claude, 12)
            await load(url, dsn, home, claude)
        finally:
            await database.__aexit__(None, None, None)


if __name__ == "__main__":
    asyncio.run(main())
