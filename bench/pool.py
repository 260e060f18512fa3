"""The job pool's own cost: 1,000 turns queued at once under a cap of 8, each an empty job (so
only the pool is timed): in one process (the local FIFO, as the bot runs on SQLite), and
through the shared queue of scale-out on the machine's PostgreSQL (each turn a row, claimed
with SKIP LOCKED by a runner woken by NOTIFY, as a worker does). Prints the overhead per job
and the most jobs that ever ran at once (never more than the cap).

Before and after in one run: the pool as it was before its turns ran as APScheduler jobs (its
own asyncio tasks; ``bot/turns/pool.py`` at commit BEFORE, read with ``git show``) against the
pool of this checkout, rounds interleaved, the median of each and their ratio."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

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
ROUNDS = 5
BEFORE = "88a7e07"  # the last commit whose pool ran its turns as its own asyncio tasks


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


def pool_before() -> Any:
    """The JobPool class of commit BEFORE, or None when git or that commit is not here."""
    try:
        source = subprocess.run(
            ["git", "show", f"{BEFORE}:bot/turns/pool.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    module = types.ModuleType("pool_before")
    sys.modules[module.__name__] = module  # its dataclasses look their module up
    exec(compile(source, f"{BEFORE}:bot/turns/pool.py", "exec"), module.__dict__)
    return module.JobPool


async def local(pool_class: Any) -> tuple[float, int]:
    counter = Counter()
    async with pool_class("bench", CAP, 60).serve(counter) as pool:
        began = time.perf_counter()
        for n in range(JOBS):
            await pool.submit(task_id=n + 1, turn_id=n + 1)
        await asyncio.wait_for(counter.done.wait(), 600)
        took = time.perf_counter() - began
    return took / JOBS * 1000, counter.most


async def shared(url: str, pool_class: Any) -> tuple[float, int]:
    store = await Store.open(url)
    for n in range(JOBS):
        task = NewTask(
            owner_id=1, chat_id=1, engine="claude", kind=TaskKind.DETACH, prompt=f"{n}", cwd=ROOT
        )
        _, turn = await store.tasks.create(task, f"t{n}")
        await store.claims.mark_submitted(turn.id)
    counter = Counter()
    lease = Lease(
        store, name="bench", host="host", role="worker", lease_s=30, engines=lambda: ["claude"]
    )
    await lease.open()
    dsn = url.replace("postgresql+asyncpg://", "postgresql://")
    async with pool_class("bench", CAP, 60, store.claims.announce).serve(counter) as pool:
        dispatcher = Dispatcher(store, pool, lease, engines=lambda: ["claude"], listen_dsn=dsn)
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


def _line(name: str, now: list[tuple[float, int]], before: list[tuple[float, int]]) -> str:
    ms = statistics.median(m for m, _ in now)
    most = max(n for _, n in now)
    line = f"{name}: {ms:.3f} ms per job, at most {most} at once (cap {CAP})"
    if before:
        was = statistics.median(m for m, _ in before)
        line += f"; before (own asyncio tasks) {was:.3f} ms: {ms / was:.2f}x"
    return line


async def main() -> None:
    old = pool_before()
    if old is None:
        print(f"pool before: not measured (no commit {BEFORE} here)")
    now: list[tuple[float, int]] = []
    before: list[tuple[float, int]] = []
    for _ in range(ROUNDS):  # interleaved: the host's swings fall on both
        now.append(await local(JobPool))
        if old is not None:
            before.append(await local(old))
    print(_line(f"pool, one process, median of {ROUNDS}", now, before))
    shared_before: list[tuple[float, int]] = []
    try:
        async with postgres_database() as url:
            shared_now = [await shared(url, JobPool)]
        if old is not None:
            async with postgres_database() as url:
                shared_before = [await shared(url, old)]
    except pytest.skip.Exception as exc:  # no PostgreSQL here
        print(f"pool, shared queue: not measured ({exc})")
        return
    print(_line("pool, shared queue on PostgreSQL", shared_now, shared_before))


if __name__ == "__main__":
    asyncio.run(main())
