"""Scale-out: the bot as a front (DETACH_ROLE=front) and a `detach worker` process sharing one
PostgreSQL database. The worker runs the turn (the real claude CLI); the bot delivers what it
says; an approval tap and a /cancel handled by the bot reach the worker through the database."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import sqlalchemy as sa

from bot.models import TaskStatus
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, stop_process
from tests.support.postgres import postgres_database
from tests.support.workers import worker_env


async def start_worker(tmp_path: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 (the child owns it)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "worker", "w1", cwd=tmp_path, env=env, stdout=log, stderr=log
    )


async def wait_status(app, task_id: int, status: TaskStatus, timeout_s: float = 60) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while (task := await app.store.tasks.get(task_id)) is None or task.status is not status:
            await asyncio.sleep(0.1)


async def test_turns_run_on_a_worker_and_the_bot_delivers(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-W1", [{"text": "answered on the worker"}])
    anthropic.script(
        "MARK-W2",
        [
            {
                "tool_use": {
                    "name": "Bash",
                    "input": {"command": "touch approved.txt", "description": "create"},
                }
            },
            {"text": "created it"},
        ],
    )
    anthropic.script(
        "MARK-W3",
        [
            {"tool_use": {"name": "Bash", "input": {"command": "sleep 60", "description": "wait"}}},
            {"text": "never"},
        ],
    )
    async with postgres_database() as url, FakeTelegram() as fake:
        # the default grace of a cancel (5 s), as these tests always ran
        env = worker_env(
            agent_env, url, tmp_path / "w", claude_bin, workdir, DETACH_CANCEL_GRACE_S="5"
        )
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, role="front", database_url=url
        )
        async with running_bot(settings, agent_env) as app:
            worker = await start_worker(tmp_path, env)
            try:
                await fake.user_message("/detach MARK-W1 go", OWNER)
                done = await fake.wait_text(OWNER, "answered on the worker", timeout_s=90)
                assert "done" in done.params["text"]
                async with app.store.engine.connect() as conn:
                    runner = (
                        await conn.execute(sa.text("SELECT runner FROM turns WHERE task_id = 1"))
                    ).scalar()
                assert runner.startswith(f"w1@{socket.gethostname()}#")  # this incarnation

                await fake.user_message("/claude MARK-W2 make the file", OWNER)
                ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
                allow = ask.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
                await fake.press(OWNER, ask.result["message_id"], allow, OWNER)
                await fake.wait_text(OWNER, "created it", timeout_s=60)
                assert (workdir / "approved.txt").exists()

                await fake.user_message("/claude mode=auto MARK-W3 wait", OWNER)
                await wait_status(app, 3, TaskStatus.RUNNING)
                async with asyncio.timeout(60):
                    while not anthropic.requests_for("MARK-W3"):
                        await asyncio.sleep(0.1)
                await asyncio.sleep(1.0)  # the Bash tool is running on the worker
                await fake.user_message("/cancel 3", OWNER)
                await wait_status(app, 3, TaskStatus.CANCELLED, timeout_s=30)
                await fake.wait_shown(OWNER, "#3 mark-w3-wait</b> · cancelled", timeout_s=30)
            finally:
                await stop_process(worker)
        assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]


async def test_a_workers_stall_watchdog_is_stopped_from_the_bot(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """The watchdog speaks from the worker that runs the turn; its Stop, tapped at the bot
    (which holds nothing of that watchdog), cancels the turn through the database."""
    anthropic.script(
        "MARK-WS",
        [
            {"tool_use": {"name": "Bash", "input": {"command": "sleep 60", "description": "wait"}}},
            {"text": "never"},
        ],
    )
    async with postgres_database() as url, FakeTelegram() as fake:
        env = worker_env(
            agent_env,
            url,
            tmp_path / "w",
            claude_bin,
            workdir,
            DETACH_CANCEL_GRACE_S="5",
            DETACH_STALL_S="2",
        )
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, role="front", database_url=url
        )
        async with running_bot(settings, agent_env) as app:
            worker = await start_worker(tmp_path, env)
            try:
                await fake.user_message("/claude mode=auto MARK-WS wait", OWNER)
                said = await fake.wait_text(OWNER, "no word from the agent", timeout_s=90)
                stop = said.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
                await fake.press(OWNER, said.result["message_id"], stop, OWNER)
                await wait_status(app, 1, TaskStatus.CANCELLED, timeout_s=30)
            finally:
                await stop_process(worker)
        assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-3000:]
