"""The job pool's own cost: 1,000 turns queued at once under a cap of 8, each an empty job (so
only the pool is timed): in one process (the local FIFO, as the bot runs on SQLite), and
through the shared queue of scale-out on the machine's PostgreSQL (each turn a row, claimed
with SKIP LOCKED by a runner woken by NOTIFY, as a worker does). Prints the overhead per job
and the most jobs that ever ran at once (never more than the cap)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.fleet.dispatch import Dispatcher  # noqa: E402
from bot.fleet.lease import Lease  # noqa: E402
from bot.models import NewTask, TaskKind  # noqa: E402
from bot.store import Store  # noqa: E402
from bot.turns.pool import Claimed, JobPool, TurnControl  # noqa: E402
from tests.support.postgres import postgres_database  # noqa: E402

JOBS = 1000
CAP = 8


class Counter:
    def __init__(self) -> None:
        self.running = self.most = self.finished = 0
        self.done = asyncio.Event()

    async def __call__(self, turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(0)
        self.running -= 1
        self.finished += 1
        if self.finished == JOBS:
            self.done.set()


async def local() -> tuple[float, int]:
    counter = Counter()
    async with JobPool("bench", CAP, 60).serve(counter) as pool:
        began = time.perf_counter()
        for n in range(JOBS):
            await pool.submit(task_id=n + 1, turn_id=n + 1)
        await asyncio.wait_for(counter.done.wait(), 600)
        took = time.perf_counter() - began
    return took / JOBS * 1000, counter.most


async def shared(url: str) -> tuple[float, int]:
    store = await Store.open(url)
    for n in range(JOBS):
        task = NewTask(
            owner_id=1, chat_id=1, engine="claude", kind=TaskKind.DETACH, prompt=f"{n}", cwd=ROOT
        )
        _, turn = await store.tasks.create(task, f"t{n}")
        await store.claims.mark_submitted(turn.id)
    counter = Counter()
    lease = Lease(store, "bench", "host", "worker", 30, lambda: ["claude"])
    await lease.open()
    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    async with JobPool("bench", CAP, 60, store.claims.announce).serve(counter) as pool:
        dispatcher = Dispatcher(store, pool, lease, lambda: ["claude"], dsn)
        began = time.perf_counter()
        claiming = asyncio.create_task(dispatcher.run_forever())
        await store.claims.announce()
        await asyncio.wait_for(counter.done.wait(), 600)
        took = time.perf_counter() - began
        claiming.cancel()  # and ended before the database goes (a claim in flight then fails)
        with contextlib.suppress(asyncio.CancelledError):
            await claiming
    await store.close()
    return took / JOBS * 1000, counter.most


async def main() -> None:
    ms, most = await local()
    print(f"pool, one process: {ms:.2f} ms per job, at most {most} at once (cap {CAP})")
    try:
        async with postgres_database() as url:
            ms, most = await shared(url)
    except pytest.skip.Exception as exc:  # no PostgreSQL here
        print(f"pool, shared queue: not measured ({exc})")
        return
    print(f"pool, shared queue on PostgreSQL: {ms:.2f} ms per job, at most {most} at once")


if __name__ == "__main__":
    asyncio.run(main())
