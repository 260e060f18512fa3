"""Does the bot stay flat? 500 tasks through the real bot (long polling against the fake Bot
API, the real store on SQLite, the pool, the outbox) with an engine that answers at once, so
that only Detach's own objects can grow. Prints RSS and open descriptors after a warm-up of 20
tasks and after 500 more, and the growth."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.fake_engine import FakeEngine  # noqa: E402
from tests.support.fake_telegram import FakeTelegram  # noqa: E402
from tests.support.harness import OWNER, make_settings, running_bot  # noqa: E402
from tests.test_checks import finished  # noqa: E402

TASKS = int(os.environ.get("BENCH_TASKS", "500"))
WARM_UP = 20
BATCH = 25


async def run(fake: FakeTelegram, first: int, count: int) -> None:
    """``count`` tasks, sent in batches, each batch waited for to its cards."""
    for start in range(first, first + count, BATCH):
        numbers = range(start, min(start + BATCH, first + count))
        for n in numbers:
            await fake.user_message(f"/claude mode=ask leak probe {n}", OWNER)
        for n in numbers:
            await fake.wait_text(OWNER, f"answer {n}.", timeout_s=120)


def footprint(process: psutil.Process) -> tuple[float, int]:
    gc.collect()
    return process.memory_info().rss / 2**20, process.num_fds()


async def main() -> None:
    engine = FakeEngine(lambda spec: finished(f"answer {spec.prompt.rsplit(' ', 1)[-1]}."))
    process = psutil.Process()
    with tempfile.TemporaryDirectory() as home:
        work = Path(home) / "work"
        work.mkdir()
        async with FakeTelegram() as fake:
            settings = make_settings(
                Path(home) / "data", fake, "claude", work, outbox_chat_interval_s=0
            )
            async with running_bot(settings, {}, executors={"claude": engine}):
                await run(fake, 0, WARM_UP)
                await asyncio.sleep(1)
                rss0, fds0 = footprint(process)
                began = time.perf_counter()
                await run(fake, WARM_UP, TASKS)
                took = time.perf_counter() - began
                await asyncio.sleep(1)
                rss1, fds1 = footprint(process)
    print(f"{TASKS} tasks in {took:.0f} s ({took / TASKS * 1000:.0f} ms each, fake engine)")
    print(f"RSS {rss0:.0f} -> {rss1:.0f} MB (+{rss1 - rss0:.1f} MB); fds {fds0} -> {fds1}")


if __name__ == "__main__":
    asyncio.run(main())
