"""A burst of tasks sent at once: every turn runs once, and every turn stops, by its timeout and
by /cancel. (A turn submitted twice, by the command and by the intake's periodic kick, used to
lose its registration in the pool and escape both.)"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import sqlalchemy as sa

from bot.app import App
from bot.models import TaskStatus
from bot.store.schema import turns
from tests.support import fake_claude
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.processes import matching

BURST = 30


async def _statuses(app) -> dict[int, TaskStatus]:  # type: ignore[no-untyped-def]
    return {t.id: t.status for t in await app.store.tasks.list_for(None, limit=100)}


async def _until(predicate, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not await predicate():
            await asyncio.sleep(0.1)


async def _runs(app) -> list[int]:  # type: ignore[no-untyped-def]
    async with app.store.engine.connect() as conn:
        return [r[0] for r in await conn.execute(sa.select(turns.c.runs).order_by(turns.c.id))]


async def _burst(fake: FakeTelegram, word: str) -> None:
    await asyncio.gather(
        *(fake.user_message(f"/detach {word} job {n}", OWNER) for n in range(BURST))
    )


async def _no_agents_left(fake_bin: str) -> None:
    async with asyncio.timeout(20):
        while matching(fake_bin):
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def _burst_bot(
    tmp_path: Path, workdir: Path, word: str, turn_timeout_s: float
) -> AsyncIterator[tuple[App, FakeTelegram, str]]:
    """The real bot with a fake agent binary and BURST ``/detach <word> job N`` sent at once."""
    fake_bin = fake_claude.script(tmp_path)
    async with FakeTelegram(flood_burst=100, flood_per_s=100) as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            fake_bin,
            workdir,
            max_concurrent_turns=BURST,
            turn_timeout_s=turn_timeout_s,
            intake_interval_s=0.02,
            cancel_grace_s=1,
            outbox_chat_interval_s=0.01,
        )
        async with running_bot(settings, {"PATH": "/usr/bin:/bin"}) as app:
            await fake.wait_call("setMyCommands")
            await _burst(fake, word)
            yield app, fake, fake_bin


async def test_a_burst_of_turns_all_stop_by_their_timeout(tmp_path: Path, workdir):
    async with _burst_bot(tmp_path, workdir, "STUBBORN", 4) as (app, _fake, fake_bin):

        async def all_timed_out() -> bool:
            statuses = await _statuses(app)
            return len(statuses) == BURST and set(statuses.values()) == {TaskStatus.TIMED_OUT}

        await _until(all_timed_out, 90)
        assert await _runs(app) == [1] * BURST  # each turn ran exactly once
        await _no_agents_left(fake_bin)


async def test_a_burst_of_turns_all_stop_on_cancel(tmp_path: Path, workdir):
    async with _burst_bot(tmp_path, workdir, "HANG", 600) as (app, fake, fake_bin):

        async def all_running() -> bool:
            statuses = await _statuses(app)
            return (
                len(statuses) == BURST
                and set(statuses.values()) == {TaskStatus.RUNNING}
                and len(matching(fake_bin)) >= BURST
            )

        await _until(all_running, 90)
        await asyncio.gather(
            *(fake.user_message(f"/cancel {n}", OWNER) for n in range(1, BURST + 1))
        )

        async def all_cancelled() -> bool:
            return set((await _statuses(app)).values()) == {TaskStatus.CANCELLED}

        await _until(all_cancelled, 60)
        assert await _runs(app) == [1] * BURST
        await _no_agents_left(fake_bin)
