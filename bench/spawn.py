"""From a Telegram update to the agent's process, with 50 turns already running: the real bot
(long polling against the fake Bot API, the store on SQLite, the pool, progress messages of
the running turns ticking), a stand-in claude (a small Python script) so that only Detach's
own path is timed. 50 turns that run until cancelled are started first; then 50 more tasks
are sent one at a time, each a turn that answers at once, and for each the time from the
update's arrival at the fake Bot API to the agent's first instruction (the stand-in's wrapper
stamps the time before it execs the stand-in, after the bot's `nice`/`setpriv` chain and bash's
own start) is taken.
Not the bot's "claude pid … started" line: that comes once the agent's pipes are connected,
while the loop runs other turns' work, up to tens of ms after the agent is running.
Prints p50 and p99 (and the same with nothing else running), and the p50 of the part from the
bot's `spawning` line to that stamp: what the agent's process chain (`nice`, `setpriv`, the PID
namespace; started ahead unless DETACH_SPAWN_AHEAD is off) takes."""

from __future__ import annotations

import asyncio
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import Figure, record  # noqa: E402
from bot import lazy_types  # noqa: E402
from executors.tree import TAG_ENV  # noqa: E402
from tests.support import fake_claude  # noqa: E402
from tests.support.fake_telegram import FakeTelegram  # noqa: E402
from tests.support.harness import OWNER, make_settings, running_bot  # noqa: E402

BUSY = 50
PROBES = int(os.environ.get("BENCH_PROBES", "50"))
IDLE_PROBES = 20


class Spawns(logging.Handler):
    """Which turn each task's agent runs (the bot's "started" line), when the bot began to
    spawn it (its "spawning" line), and when each turn's agent began (the wall-clock stamps its
    wrapper wrote, by the turn in its process tag)."""

    def __init__(self, stamps: Path) -> None:
        super().__init__(logging.DEBUG)
        self.stamps = stamps
        self.turn_of: dict[int, int] = {}
        self.spawning: dict[int, float] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if record.name == "executors.process" and message.endswith(" spawning"):
            self.spawning.setdefault(int(message.split()[1]), record.created)
        if record.name == "executors.process" and " started" in message:
            words = message.split()  # "task 7 turn 7: claude pid … started"
            self.turn_of.setdefault(int(words[1]), int(words[3].rstrip(":")))

    async def at(self, task_id: int, wait_s: float = 10.0) -> float:
        """When the agent of the task's turn began; its wrapper may still be writing the stamp
        when the bot says "started" (bounded wait)."""
        turn = self.turn_of[task_id]
        async with asyncio.timeout(wait_s):
            while True:
                for line in self.stamps.read_text().splitlines():
                    tag, _, stamp = line.partition(" ")
                    if tag.rpartition(":")[2].partition(".")[0] == str(turn):
                        return float(stamp)
                await asyncio.sleep(0.01)


def stamped(agent: str, stamps: Path) -> str:
    """A wrapper that writes its process tag and the time, then execs ``agent``."""
    path = stamps.parent / "stamped-claude"
    path.write_text(
        # bash's $EPOCHREALTIME: the time without a `date` process of its own
        f'#!/bin/bash\nprintf "%s %s\\n" "${TAG_ENV}" "$EPOCHREALTIME" >> {stamps}\n'
        f'exec {agent} "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


async def probe(fake: FakeTelegram, spawns: Spawns, task_id: int) -> tuple[float, float]:
    """From the update to the agent, and from the bot's spawn to the agent (seconds)."""
    began = time.time()  # the wrapper's clock
    await fake.user_message(f"/claude mode=auto probe {task_id}", OWNER)
    async with asyncio.timeout(30):
        while task_id not in spawns.turn_of:
            await asyncio.sleep(0.001)
    await fake.wait_text(OWNER, f"probe {task_id}", timeout_s=30)  # its card: it is done
    at = await spawns.at(task_id)
    return at - began, at - spawns.spawning[task_id]


def percentiles(values: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return 1000 * statistics.median(values), 1000 * cuts[98]


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        (home / "work").mkdir()
        stamps = home / "stamps"
        stamps.touch()
        claude = stamped(fake_claude.script(home), stamps)
        spawns = Spawns(stamps)
        logging.getLogger("executors.process").addHandler(spawns)
        logging.getLogger("executors.process").setLevel(logging.DEBUG)
        env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
        async with FakeTelegram(flood_burst=200, flood_per_s=200) as fake:
            settings = make_settings(
                home / "data",
                fake,
                claude,
                home / "work",
                max_concurrent_turns=BUSY + 8,
                progress_delay_s=1.0,
                progress_interval_s=3.0,
            )
            async with running_bot(settings, env):
                await fake.wait_call("setMyCommands")
                await lazy_types.warm()  # as `detach run` does once polling started
                task_id = 1
                first, _ = await probe(fake, spawns, task_id)  # the first task after start
                idle, idle_chain = [], []
                for _ in range(IDLE_PROBES):
                    task_id += 1
                    whole, chain = await probe(fake, spawns, task_id)
                    idle.append(whole)
                    idle_chain.append(chain)
                for _ in range(BUSY):
                    task_id += 1
                    await fake.user_message(f"/claude mode=auto HANG busy {task_id}", OWNER)
                async with asyncio.timeout(120):
                    while len([t for t in spawns.turn_of if t > IDLE_PROBES + 1]) < BUSY:
                        await asyncio.sleep(0.05)
                await asyncio.sleep(2.0)  # their progress messages are ticking now
                busy, busy_chain = [], []
                for _ in range(PROBES):
                    task_id += 1
                    whole, chain = await probe(fake, spawns, task_id)
                    busy.append(whole)
                    busy_chain.append(chain)
                for n in range(IDLE_PROBES + 2, IDLE_PROBES + 2 + BUSY):
                    await fake.user_message(f"/cancel {n}", OWNER)
                await asyncio.sleep(3.0)
    print(f"update -> agent spawned, the first task after start: {1000 * first:.0f} ms")
    p50, p99 = percentiles(idle)
    print(f"update -> agent spawned, nothing else running: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    record(Figure("update -> agent spawned, idle, p50", p50, "ms"))
    record(Figure("update -> agent spawned, idle, p99", p99, "ms"))
    p50, p99 = percentiles(busy)
    record(Figure(f"update -> agent spawned, {BUSY} running, p50", p50, "ms", 10.0))
    record(Figure(f"update -> agent spawned, {BUSY} running, p99", p99, "ms", 30.0))
    print(
        f"update -> agent spawned, {BUSY} turns running: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
        f"({PROBES} probes)"
    )
    ahead = "started ahead" if settings.spawn_ahead else "cold"
    for label, values in (("idle", idle_chain), (f"{BUSY} running", busy_chain)):
        p50 = 1000 * statistics.median(values)
        print(f"the bot's spawn -> agent running, {label}: p50 {p50:.1f} ms (its chain {ahead})")
        record(Figure(f"the bot's spawn -> agent running, {label}, p50", p50, "ms"))


if __name__ == "__main__":
    asyncio.run(main())
