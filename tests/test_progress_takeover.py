"""A turn's progress message never outlives it when its process dies removing it: kill -9 at the
moment between marking the message retired and queueing its deletion (bot/failpoints.py). A
worker of a front bot on the machine's PostgreSQL: the front takes the turn over; the one
process on SQLite: its next start recovers the turn. Either way no message still says
"· running"."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from tests.support import fake_claude
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import (
    OWNER,
    front_settings,
    process_env,
    running_bot,
    stop_process,
)
from tests.support.postgres import postgres_database
from tests.support.workers import Worker, worker_env

FAILPOINT = "retire.before_delete"
FAST_PROGRESS = {"DETACH_PROGRESS_DELAY_S": "0.3", "DETACH_PROGRESS_INTERVAL_S": "0.5"}


async def test_a_worker_killed_removing_its_progress_leaves_no_running_line(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-P1",
        [
            {"tool_use": {"name": "Bash", "input": {"command": "sleep 3", "description": "w"}}},
            {"text": "slept"},
        ],
    )
    async with postgres_database() as url, FakeTelegram() as fake:
        env = {
            "DETACH_WORKER_LEASE_S": "3",
            "DETACH_FAILPOINT": FAILPOINT,
            **FAST_PROGRESS,
        }
        worker = Worker(
            "w1",
            worker_env(agent_env, url, tmp_path / "w1", claude_bin, workdir, **env),
            tmp_path / "w1.log",
        )
        settings = front_settings(
            tmp_path,
            fake,
            claude_bin,
            workdir,
            url,
            worker_lease_s=3,
        )
        async with running_bot(settings, agent_env) as app:
            try:
                await worker.start()
                await fake.user_message("/claude mode=auto MARK-P1 wait", OWNER)
                await fake.wait_text(OWNER, "· running · ", timeout_s=60)  # progress, delivered
                assert worker.proc is not None
                # the turn ends: its worker dies as it removes the progress message
                assert await asyncio.wait_for(worker.proc.wait(), 60) == -9, worker.tail()
                assert f"failpoint {FAILPOINT}" in worker.tail()
                notice = await fake.wait_text(OWNER, "Worker <b>w1</b>", timeout_s=30)
                assert "#1" in notice.params["text"]
                assert await app.outbox.idle(30)
                await asyncio.sleep(0.5)  # the last edits reach the fake Bot API
            finally:
                if worker.alive:
                    await worker.stop()
        shown = [m.get("text", "") for m in fake.messages.get(OWNER, [])]
        assert not [text for text in shown if "· running" in text], shown


def running_lines(fake: FakeTelegram) -> list[str]:
    return [
        m.get("text", "") for m in fake.messages.get(OWNER, []) if "· running" in m.get("text", "")
    ]


async def test_a_bot_killed_removing_a_cancelled_turns_progress_leaves_no_running_line(
    tmp_path, workdir
):
    fake_bin = fake_claude.script(tmp_path)
    agent = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}
    async with FakeTelegram() as fake:
        env = {
            **process_env(agent, fake, tmp_path / "data", fake_bin, workdir),
            "DETACH_INTAKE_INTERVAL_S": "0.2",
            "DETACH_CANCEL_GRACE_S": "1",
            **FAST_PROGRESS,
        }
        bot = await start_bot(tmp_path, {**env, "DETACH_FAILPOINT": FAILPOINT})
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            await fake.user_message("/detach HANG for a while", OWNER)
            await fake.wait_text(OWNER, "· running · ", timeout_s=60)  # progress, delivered
            await fake.user_message("/cancel 1", OWNER)  # the turn ends: its progress goes
            assert await asyncio.wait_for(bot.wait(), 60) == -9
            assert f"failpoint {FAILPOINT}" in (tmp_path / "bot.log").read_text()
            mark = len(fake.calls)
            bot = await start_bot(tmp_path, env)
            await fake.wait_text(OWNER, "restarted while", timeout_s=60, after=mark)
            async with asyncio.timeout(30):  # what the restart queued reaches the chat
                while running_lines(fake):
                    await asyncio.sleep(0.1)
        except TimeoutError:
            raise AssertionError(running_lines(fake)) from None
        finally:
            await stop_process(bot)


async def start_bot(tmp_path: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    log = open(tmp_path / "bot.log", "ab")  # noqa: SIM115 (the child owns it)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", cwd=tmp_path, env=env, stdout=log, stderr=log
    )
