"""Does the bot stay flat? 500 tasks through the real bot (long polling against the fake Bot
API, the real store on SQLite, the pool, the outbox), twice: in this process with an engine that
answers at once (only Detach's own objects can grow; the fake server's records of every call
grow beside them), and as deployed, `python -m bot run` a process of its own (-OO) whose agent
is a stand-in claude that answers at once (a real process per turn, its pipes and its reaping).
Prints RSS and open descriptors after a warm-up of 20 tasks and after 500 more, and the
growth."""

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

from tests.support import fake_claude  # noqa: E402
from tests.support.fake_engine import FakeEngine  # noqa: E402
from tests.support.fake_telegram import TOKEN, FakeTelegram  # noqa: E402
from tests.support.harness import OWNER, make_settings, running_bot, stop_process  # noqa: E402
from tests.test_checks import finished  # noqa: E402

TASKS = int(os.environ.get("BENCH_TASKS", "500"))
WARM_UP = 20
BATCH = 25


async def run(fake: FakeTelegram, first: int, count: int, answer: str = "answer {n}.") -> None:
    """``count`` tasks, sent in batches, each batch waited for to its cards."""
    for start in range(first, first + count, BATCH):
        numbers = range(start, min(start + BATCH, first + count))
        for n in numbers:
            await fake.user_message(f"/claude mode=ask leak probe {n}", OWNER)
        for n in numbers:
            await fake.wait_text(OWNER, answer.format(n=n), timeout_s=120)


def footprint(process: psutil.Process) -> tuple[float, int]:
    gc.collect()
    return process.memory_info().rss / 2**20, process.num_fds()


async def in_process() -> None:
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


async def as_deployed() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "work").mkdir()
        async with FakeTelegram(flood_burst=1000, flood_per_s=1000) as fake:
            env = {
                "PATH": "/usr/bin:/bin",
                "HOME": str(home),
                "LANG": "C.UTF-8",
                "DETACH_BOT_TOKEN": TOKEN,
                "DETACH_ALLOWED_USERS": str(OWNER),
                "DETACH_TELEGRAM_API_URL": fake.base_url,
                "DETACH_DATA_DIR": str(home / "data"),
                "DETACH_WORKDIR": str(home / "work"),
                "DETACH_CLAUDE_BIN": fake_claude.script(home),
                "DETACH_OUTBOX_CHAT_INTERVAL_S": "0",
                "DETACH_OUTBOX_CHAT_BURST": "1000",
                "PYTHONPATH": str(ROOT),
            }
            bot = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "run", env=env, stderr=asyncio.subprocess.DEVNULL
            )
            try:
                await fake.wait_call("setMyCommands", timeout_s=60)
                process = psutil.Process(bot.pid)
                answer = "fake answer to: leak probe {n}"
                await run(fake, 0, WARM_UP, answer)
                await asyncio.sleep(1)
                rss0, fds0 = process.memory_info().rss / 2**20, process.num_fds()
                began = time.perf_counter()
                await run(fake, WARM_UP, TASKS, answer)
                took = time.perf_counter() - began
                await asyncio.sleep(1)
                rss1, fds1 = process.memory_info().rss / 2**20, process.num_fds()
            finally:
                await stop_process(bot)
    print(f"{TASKS} tasks in {took:.0f} s through `python -m bot run` (stand-in claude process)")
    print(f"RSS {rss0:.0f} -> {rss1:.0f} MB (+{rss1 - rss0:.1f} MB); fds {fds0} -> {fds1}")


async def main() -> None:
    await in_process()
    await as_deployed()


if __name__ == "__main__":
    asyncio.run(main())
