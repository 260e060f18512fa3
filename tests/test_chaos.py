"""The chaos drill: 30 tasks sent in bursts while the bot is killed with kill -9 at random
moments and a fifth of the Bot API calls fail (429, HTML 502 pages, 500s, dropped
connections). Afterwards: no task lost or doubled, no turn run twice unasked, every interrupted
task surfaced exactly once, every task's messages in order, no progress message left."""

from __future__ import annotations

import asyncio
import random
import re
from pathlib import Path

import sqlalchemy as sa

from bot.models import TaskStatus
from bot.store import Store
from bot.store.schema import turns
from tests.support import fake_claude
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, process_env, stop_process
from tests.test_crash_windows import _start

TASKS, BURSTS = 30, 3
NOTICE = "restarted while these tasks were running"


async def _store_state(data_dir: Path) -> tuple[list, list[int]]:  # type: ignore[type-arg]
    store = await Store.open(f"sqlite+aiosqlite:///{data_dir / 'detach.sqlite'}")
    try:
        tasks = await store.tasks.list_for(None, limit=100)
        async with store.engine.connect() as conn:
            runs = [r[0] for r in await conn.execute(sa.select(turns.c.runs))]
        pending = await store.outbox.count("pending")
        return tasks, [*runs, -pending] if pending else runs
    finally:
        await store.close()


async def test_thirty_tasks_through_kill_9_and_bot_api_faults(tmp_path: Path, workdir):
    rng = random.Random(11)
    fake_bin = fake_claude.script(tmp_path)
    data_dir = tmp_path / "data"
    agent = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    async with FakeTelegram(flood_burst=50, flood_per_s=50, chaos_rate=0.2, seed=7) as fake:
        env = {
            **process_env(agent, fake, data_dir, fake_bin, workdir),
            "DETACH_INTAKE_INTERVAL_S": "0.2",
            "DETACH_CANCEL_GRACE_S": "1",
            "DETACH_OUTBOX_CHAT_INTERVAL_S": "0.05",
            "DETACH_MAX_CONCURRENT_TURNS": "6",
            "DETACH_PROGRESS_INTERVAL_S": "0.5",
        }
        bot = await _start(tmp_path, env)
        try:
            per_burst = TASKS // BURSTS
            for burst in range(BURSTS):
                for n in range(burst * per_burst, (burst + 1) * per_burst):
                    await fake.user_message(f"/detach NAP job{n:02d}", OWNER)
                await asyncio.sleep(rng.uniform(0.5, 3.0))
                bot.kill()  # kill -9 at a random moment of the burst
                await bot.wait()
                bot = await _start(tmp_path, env)

            async def settled() -> bool:
                tasks, runs = await _store_state(data_dir)
                return (
                    len(tasks) == TASKS
                    and not [t for t in tasks if t.status.active]
                    and min(runs, default=0) >= 0
                )

            try:  # inside pytest's own limit, so a stuck run says what is stuck
                async with asyncio.timeout(100):
                    while not await settled():
                        await asyncio.sleep(0.5)
            except TimeoutError:
                tasks, runs = await _store_state(data_dir)
                stuck = [(t.label, t.status.value) for t in tasks if t.status.active]
                log = (tmp_path / "bot.log").read_text(errors="replace")[-6000:]
                titles = sorted(t.title for t in tasks)
                raise AssertionError(
                    f"not settled: {len(tasks)} tasks {titles}, active {stuck}, runs {runs}\n{log}"
                ) from None
        finally:
            await stop_process(bot)

    tasks, runs = await _store_state(data_dir)
    titles = sorted(t.title for t in tasks)
    assert titles == [f"NAP job{n:02d}" for n in range(TASKS)]  # none lost, none doubled
    assert all(r <= 1 for r in runs)  # no turn ran twice unasked
    sent = [c for c in fake.calls if c.method == "sendMessage" and c.ok]
    interrupted = {t.label for t in tasks if t.status is TaskStatus.INTERRUPTED}
    for task in tasks:
        label = task.label
        mine = [i for i, c in enumerate(sent) if re.search(rf"#{task.id}\b", c.params["text"])]
        notices = [i for i in mine if NOTICE in sent[i].params["text"]]
        assert len(notices) == (1 if label in interrupted else 0), label
        acks = [
            i for i in mine if "queued" in sent[i].params["text"] or "🕓" in sent[i].params["text"]
        ]
        assert acks and acks[0] == mine[0], f"{label}: its acknowledgement comes first"
    shown = {c.result["message_id"] for c in sent if "· running ·" in c.params["text"]}
    removed = {
        int(c.params["message_id"]) for c in fake.calls if c.method == "deleteMessage" and c.ok
    }
    assert shown <= removed, "no progress message outlives its turn"
