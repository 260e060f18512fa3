"""The job pool's own cost: 1,000 turns queued at once under a cap of 8, each an empty job (so
only the pool is timed), in one process (the local FIFO, as the bot runs) and through
APScheduler's SQLite store (the path scale-out takes, on SQLite here). Prints the overhead per
job and the most jobs that ever ran at once (never more than the cap)."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.turns.pool import JobPool, TurnControl  # noqa: E402

JOBS = 1000
CAP = 8


async def measure(jobs_url: str | None) -> tuple[float, int]:
    running = 0
    most = 0
    done = asyncio.Event()
    finished = 0

    async def handler(turn_id: int, control: TurnControl) -> None:
        nonlocal running, most, finished
        running += 1
        most = max(most, running)
        await asyncio.sleep(0)
        running -= 1
        finished += 1
        if finished == JOBS:
            done.set()

    async with JobPool(jobs_url, "bench", CAP, 60).serve(handler) as pool:
        began = time.perf_counter()
        for n in range(JOBS):
            await pool.submit(task_id=n + 1, turn_id=n + 1)
        await asyncio.wait_for(done.wait(), 600)
        took = time.perf_counter() - began
    return took / JOBS * 1000, most


async def main() -> None:
    local_ms, local_most = await measure(None)
    print(f"pool, one process: {local_ms:.2f} ms per job, at most {local_most} at once (cap {CAP})")
    with tempfile.TemporaryDirectory() as home:
        store_ms, store_most = await measure(f"sqlite+aiosqlite:///{home}/jobs.sqlite")
    print(f"pool, APScheduler store: {store_ms:.2f} ms per job, at most {store_most} at once")


if __name__ == "__main__":
    asyncio.run(main())
