"""kill -9 aimed at the moments between two writes (bot/failpoints.py), then a normal start: no
command is lost, no finished task goes unreported, no interruption goes unsaid."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.models import TaskStatus
from bot.store import Store
from bot.store.schema import outbox
from tests.support import fake_claude
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, process_env, stop_process


async def _start(
    tmp_path: Path, env: dict[str, str], failpoint: str | None = None
) -> asyncio.subprocess.Process:
    log = open(tmp_path / "bot.log", "ab")  # noqa: SIM115 (the child owns it)
    env = {**env, "DETACH_FAILPOINT": failpoint} if failpoint else env
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", cwd=tmp_path, env=env, stdout=log, stderr=log
    )


async def _killed(proc: asyncio.subprocess.Process) -> None:
    assert await asyncio.wait_for(proc.wait(), 60) == -9


async def _tasks(data_dir: Path) -> list:  # type: ignore[type-arg]
    store = await Store.open(f"sqlite+aiosqlite:///{data_dir / 'detach.sqlite'}")
    try:
        return await store.tasks.list_for(None)
    finally:
        await store.close()


async def _progress_recorded(data_dir: Path) -> bool:
    store = await Store.open(f"sqlite+aiosqlite:///{data_dir / 'detach.sqlite'}")
    try:
        async with store.engine.connect() as conn:
            return bool(
                (
                    await conn.execute(
                        sa.select(outbox.c.id).where(
                            outbox.c.link_kind == "progress", outbox.c.status == "sent"
                        )
                    )
                ).first()
            )
    finally:
        await store.close()


@pytest.fixture
def env(tmp_path: Path, workdir: Path) -> dict[str, str]:
    fake_bin = fake_claude.script(tmp_path)
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "_FAKE_BIN": fake_bin,
        "_WORKDIR": str(workdir),
    }


def _bot_env(base: dict[str, str], fake: FakeTelegram, data_dir: Path) -> dict[str, str]:
    agent = {k: v for k, v in base.items() if not k.startswith("_")}
    return {
        **process_env(agent, fake, data_dir, base["_FAKE_BIN"], Path(base["_WORKDIR"])),
        "DETACH_INTAKE_INTERVAL_S": "0.2",
        "DETACH_CANCEL_GRACE_S": "1",
    }


async def test_a_command_confirmed_to_telegram_before_its_task_was_stored(tmp_path, env):
    data_dir = tmp_path / "data"
    async with FakeTelegram() as fake:
        bot_env = _bot_env(env, fake, data_dir)
        bot = await _start(tmp_path, bot_env, "task.before_commit")
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            await fake.user_message("/detach quick job", OWNER)
            await _killed(bot)
            assert fake.delivered and not fake.unconfirmed(), "Telegram forgot the update"
            assert await _tasks(data_dir) == []

            bot = await _start(tmp_path, bot_env)
            await fake.wait_text(OWNER, "#1 quick-job", timeout_s=60)
            card = await fake.wait_text(OWNER, "fake answer to", timeout_s=60)
            assert "#1" in card.params["text"]
            assert [(t.id, t.status) for t in await _tasks(data_dir)] == [(1, TaskStatus.DONE)]
        finally:
            await stop_process(bot)


async def _killed_at(
    tmp_path: Path, fake: FakeTelegram, bot_env: dict[str, str], failpoint: str
) -> asyncio.subprocess.Process:
    """``/detach quick job`` to a bot that dies at ``failpoint``; returns it started again."""
    bot = await _start(tmp_path, bot_env, failpoint)
    try:
        await fake.wait_call("setMyCommands", timeout_s=60)
        await fake.user_message("/detach quick job", OWNER)
        await _killed(bot)
    finally:
        await stop_process(bot)
    return await _start(tmp_path, bot_env)


async def test_a_turn_killed_while_recording_its_outcome_is_surfaced(tmp_path, env):
    data_dir = tmp_path / "data"
    async with FakeTelegram() as fake:
        mark = len(fake.calls)
        bot = await _killed_at(
            tmp_path, fake, _bot_env(env, fake, data_dir), "finish.before_commit"
        )
        try:
            notice = await fake.wait_text(
                OWNER, "restarted while these tasks were running", timeout_s=60, after=mark
            )
            assert "#1 quick-job" in notice.params["text"]
            assert [(t.id, t.status) for t in await _tasks(data_dir)] == [
                (1, TaskStatus.INTERRUPTED)
            ]
        finally:
            await stop_process(bot)


async def test_a_turn_killed_after_recording_its_outcome_still_reports(tmp_path, env):
    data_dir = tmp_path / "data"
    async with FakeTelegram() as fake:
        bot = await _killed_at(tmp_path, fake, _bot_env(env, fake, data_dir), "finish.after_commit")
        try:
            card = await fake.wait_text(OWNER, "fake answer to", timeout_s=60)
            assert "#1 quick-job" in card.params["text"]
            assert [(t.id, t.status) for t in await _tasks(data_dir)] == [(1, TaskStatus.DONE)]
            assert not [
                c
                for c in fake.calls
                if c.method == "sendMessage" and "restarted while" in c.params["text"]
            ]
        finally:
            await stop_process(bot)


async def test_a_recovery_killed_before_its_notice_recovers_again(tmp_path, env):
    data_dir = tmp_path / "data"
    async with FakeTelegram() as fake:
        bot_env = _bot_env(env, fake, data_dir)
        bot = await _start(tmp_path, bot_env)
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            await fake.user_message("/detach HANG for a while", OWNER)
            await fake.wait_text(OWNER, "#1 hang-while")
            progress = await fake.wait_text(OWNER, "· running ·")
            assert [t.status for t in await _tasks(data_dir)] == [TaskStatus.RUNNING]
            # killed once the bot recorded the progress message as sent (a kill in between
            # is the Bot API's own window: a message sent whose answer was lost)
            async with asyncio.timeout(10):
                while not await _progress_recorded(data_dir):
                    await asyncio.sleep(0.05)
            bot.kill()
            await _killed(bot)
            bot = await _start(tmp_path, bot_env, "recover.before_commit")
            await _killed(bot)
            assert [t.status for t in await _tasks(data_dir)] == [TaskStatus.RUNNING]
            mark = len(fake.calls)
            bot = await _start(tmp_path, bot_env)
            notice = await fake.wait_text(
                OWNER, "restarted while these tasks were running", timeout_s=60, after=mark
            )
            assert "#1 hang-while" in notice.params["text"]
            notices = [
                c
                for c in fake.calls
                if c.method == "sendMessage" and "restarted while" in c.params["text"]
            ]
            assert len(notices) == 1
            # the progress message the crash left is removed, not left "running" for ever
            await fake.wait_call(
                "deleteMessage",
                lambda c: int(c.params["message_id"]) == progress.result["message_id"],
                timeout_s=30,
            )
        finally:
            await stop_process(bot)


async def test_a_daemon_dies_with_a_killed_bot_even_without_its_watchdog(tmp_path, env):
    """The agent double-forked a daemon (its own session, no pipes) and the bot was killed
    with its watchdog: the daemon dies with the agents' PID namespace all the same
    (executors/pidns.py; before it, the parent-death signal stopped the agent but not the
    daemon, and the next start had to); the next start says where the task is."""
    import psutil

    from tests.support.processes import daemons_of

    data_dir = tmp_path / "data"
    async with FakeTelegram() as fake:
        bot_env = _bot_env(env, fake, data_dir)
        bot = await _start(tmp_path, bot_env)
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            first = bot.pid
            await fake.user_message("/detach DAEMON HANG spawn a daemon", OWNER)
            async with asyncio.timeout(30):
                while not (ours := {proc.pid for proc in daemons_of(first)}):
                    await asyncio.sleep(0.1)
            for child in psutil.Process(bot.pid).children():
                if "executors.watchdog" in " ".join(child.cmdline()):
                    child.kill()  # the watchdog first: it would stop the daemon
            bot.kill()
            await _killed(bot)
            async with asyncio.timeout(5):  # this test's daemon, by pid
                while ours & {proc.pid for proc in daemons_of(first)}:
                    await asyncio.sleep(0.05)
            mark = len(fake.calls)
            bot = await _start(tmp_path, bot_env)
            await fake.wait_text(
                OWNER, "restarted while these tasks were running", timeout_s=60, after=mark
            )
        finally:
            await stop_process(bot)
            for proc in daemons_of(first, bot.pid):  # this test's, not another worker's
                proc.kill()


async def test_a_cancel_cut_short_by_a_kill_leaves_no_cancelling(tmp_path, env):
    """``/cancel`` answered "cancelling…", then the bot died before the turn's card took that
    message over: at the next start it says where the task is (interrupted), not
    "cancelling…" for ever."""
    data_dir = tmp_path / "data"
    async with FakeTelegram() as fake:
        bot_env = _bot_env(env, fake, data_dir)
        bot = await _start(tmp_path, bot_env, "finish.before_commit")
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            await fake.user_message("/detach HANG for a while", OWNER)
            await fake.wait_text(OWNER, "#1 hang-while")
            await fake.wait_text(OWNER, "· running ·")  # its agent runs (its progress says)
            await fake.user_message("/cancel 1", OWNER)
            await _killed(bot)
            bot = await _start(tmp_path, bot_env)
            await fake.wait_text(OWNER, "restarted while these tasks were running", timeout_s=60)
            assert [t.status for t in await _tasks(data_dir)] == [TaskStatus.INTERRUPTED]
            said = "⚠️ #1 hang-while · interrupted"  # the answer to /cancel, now
            async with asyncio.timeout(30):
                while said not in [m.get("text") for m in fake.bot_messages(OWNER)]:
                    await asyncio.sleep(0.1)
            texts = [str(m.get("text")) for m in fake.bot_messages(OWNER)]
            assert not [t for t in texts if "cancelling" in t], texts
        finally:
            await stop_process(bot)
