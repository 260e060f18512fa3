"""The bot's start-up and footprint as a person runs it: `python -m bot run` (a real process,
its settings in the environment) against the fake Bot API server over HTTP. Prints the time from
spawn to its first `getUpdates`, its RSS once idle (5 s after that), and its open file
descriptors then. No agent runs here (the engines' probes do). Exits 1 if the idle RSS of any
start is above the target, IDLE_RSS_TARGET_MB."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import Figure, record  # noqa: E402
from tests.support.fake_telegram import TOKEN, FakeTelegram  # noqa: E402
from tests.support.harness import OWNER  # noqa: E402

IDLE_S = 5.0
IDLE_RSS_TARGET_MB = 100
RUNS = int(os.environ.get("BENCH_RUNS", "3"))


async def one_start(home: Path, claude: str | None) -> tuple[float, float, int]:
    async with FakeTelegram() as fake:
        work = home / "work"
        work.mkdir(exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "DETACH_BOT_TOKEN": TOKEN,
            "DETACH_ALLOWED_USERS": str(OWNER),
            "DETACH_TELEGRAM_API_URL": fake.base_url,
            "DETACH_DATA_DIR": str(home / "data"),
            "DETACH_WORKDIR": str(work),
            "PYTHONPATH": str(ROOT),
        }
        if claude:
            env["DETACH_CLAUDE_BIN"] = claude
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", env=env, stderr=asyncio.subprocess.DEVNULL
        )
        try:
            async with asyncio.timeout(60):
                while not (polls := [t for m, t in fake.arrivals if m == "getUpdates"]):
                    await asyncio.sleep(0.01)
            first_poll = polls[0] - start
            await asyncio.sleep(IDLE_S)
            process = psutil.Process(proc.pid)
            return first_poll, process.memory_info().rss / 2**20, process.num_fds()
        finally:
            proc.terminate()
            await proc.wait()


async def main() -> None:
    claude = os.environ.get("DETACH_TEST_CLAUDE_BIN")
    results = []
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory() as home:
            results.append(await one_start(Path(home), claude))
    polls, rss, fds = zip(*results, strict=True)
    each = ", ".join(f"{p:.2f}" for p in polls)
    best, worst = min(polls), max(polls)
    print(f"first getUpdates after spawn: {best:.2f} s best, {worst:.2f} s worst ({each})")
    print(f"idle RSS: {min(rss):.0f}-{max(rss):.0f} MB; open fds when idle: {min(fds)}-{max(fds)}")
    record(
        Figure(
            "first getUpdates after exec (median of starts)",
            statistics.median(polls),
            "s",
            1.5,
            note=f"starts: {each}",
        )
    )
    record(
        Figure(
            "idle RSS of the bot",
            max(rss),
            "MB",
            IDLE_RSS_TARGET_MB,
            note=f"{max(fds)} open descriptors",
        )
    )
    met = max(rss) <= IDLE_RSS_TARGET_MB
    print(f"idle RSS target <= {IDLE_RSS_TARGET_MB} MB: {'met' if met else 'MISSED'}")
    if not met:
        sys.exit(1)


if __name__ == "__main__":
    asyncio.run(main())
