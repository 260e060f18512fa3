"""Restart safety: kill -9 the bot process during a running turn, start it again."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import psutil

from bot.models import TaskStatus
from bot.store import Store
from bot.telegram.callbacks import TaskAction
from tests.support.fake_telegram import TOKEN, FakeTelegram
from tests.support.harness import OWNER, process_env, stop_process
from tests.support.processes import matching

# each test's agent sleeps its own length: the tests run on several xdist workers at once and find
# their agents by command line, so one test must never see (or kill) another's
KILL_SLEEP = "sleep 47.25"
TERM_SLEEP = "sleep 47.75"


def _sleepers(marker: str) -> list[psutil.Process]:
    return matching(marker)


async def _start_bot(tmp_path: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    log = open(tmp_path / "bot.log", "ab")  # noqa: SIM115 (the child owns it)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", cwd=tmp_path, env=env, stdout=log, stderr=log
    )


async def _until(predicate, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.1)


async def test_kill_9_during_a_turn_then_resume(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-KILL",
        [
            {"tool_use": {"name": "Bash", "input": {"command": KILL_SLEEP, "description": "wait"}}},
            {"text": "Resumed and finished."},
        ],
    )
    data_dir = tmp_path / "data"
    async with FakeTelegram() as fake:
        env = process_env(agent_env, fake, data_dir, claude_bin, workdir)
        bot = await _start_bot(tmp_path, env)
        try:
            await fake.wait_call("setMyCommands", timeout_s=30)
            await fake.user_message("/detach MARK-KILL wait a while", OWNER)
            await fake.wait_text(OWNER, "#1 mark-kill-wait")
            await _until(lambda: bool(_sleepers(KILL_SLEEP)), 30)
            os.kill(bot.pid, signal.SIGKILL)
            await asyncio.wait_for(bot.wait(), 10)
            # the agent got its parent-death signal (SIGKILL) and the bot's watchdog stopped its
            # tool (its own process group): no orphan is left
            await _until(lambda: not _sleepers(KILL_SLEEP), 20)

            mark = len(fake.calls)
            bot = await _start_bot(tmp_path, env)
            notice = await fake.wait_text(
                OWNER, "restarted while these tasks were running", timeout_s=30, after=mark
            )
            assert "#1 mark-kill-wait" in notice.params["text"]
            buttons = [
                b["callback_data"]
                for row in notice.params["reply_markup"]["inline_keyboard"]
                for b in row
            ]
            resume = TaskAction(action="resume", task_id=1).pack()
            assert resume in buttons and TaskAction(action="fail", task_id=1).pack() in buttons

            store = await Store.open(f"sqlite+aiosqlite:///{data_dir / 'detach.sqlite'}")
            try:
                task = await store.tasks.get(1)
                assert task.status is TaskStatus.INTERRUPTED
                assert (await store.tasks.last_turn(1)).status is TaskStatus.INTERRUPTED
            finally:
                await store.close()

            await fake.wait_call("setMyCommands", after=mark)
            query = await fake.press(OWNER, notice.result["message_id"], resume, OWNER)
            # "resuming the session", or already "resumed session · running" when it goes out
            await fake.wait_text(OWNER, "#1 mark-kill-wait</b> · resum", after=mark)
            answer = await fake.wait_call(
                "answerCallbackQuery", lambda c: c.params["callback_query_id"] == query
            )
            assert answer.params["text"] == "Resuming."
            done = await fake.wait_text(OWNER, "done", timeout_s=60, after=mark)
            assert "Resumed and finished." in done.params["text"]
            last = anthropic.requests_for("MARK-KILL")[-1]
            assert "was interrupted because the bot process stopped" in str(last["messages"])
        finally:
            await stop_process(bot)
            for proc in _sleepers(KILL_SLEEP):
                proc.kill()
    assert bot.returncode is not None
    log = (tmp_path / "bot.log").read_text()
    assert "task 1 turn 1: running" in log and "claude 2.1.197" in log
    assert TOKEN.split(":")[1] not in log  # secrets never reach the log
    assert "MARK-KILL" not in log  # nor prompts, at INFO


async def test_sigterm_stops_agents_cleanly_and_the_next_start_reports(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """What `systemctl stop` does: the bot stops its agents (no orphans) and exits promptly; the
    turn it stopped is offered for resume at the next start."""
    anthropic.script(
        "MARK-TERM",
        [
            {"tool_use": {"name": "Bash", "input": {"command": TERM_SLEEP, "description": "wait"}}},
            {"text": "after"},
        ],
    )
    async with FakeTelegram() as fake:
        env = process_env(agent_env, fake, tmp_path / "data", claude_bin, workdir)
        bot = await _start_bot(tmp_path, env)
        try:
            await fake.user_message("/detach MARK-TERM wait", OWNER)
            await _until(lambda: bool(_sleepers(TERM_SLEEP)), 30)
            bot.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(bot.wait(), 15) == 0
            assert _sleepers(TERM_SLEEP) == []
            mark = len(fake.calls)
            bot = await _start_bot(tmp_path, env)
            notice = await fake.wait_text(
                OWNER, "restarted while these tasks were running", timeout_s=30, after=mark
            )
            assert "#1 mark-term-wait" in notice.params["text"]
        finally:
            await stop_process(bot)
            for proc in _sleepers(TERM_SLEEP):
                proc.kill()


async def test_pending_approval_at_kill_9_is_expired_after_restart(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-PENDING",
        [
            {
                "tool_use": {
                    "name": "Bash",
                    "input": {"command": "touch pending.txt", "description": "create"},
                }
            },
            {"text": "never"},
        ],
    )
    async with FakeTelegram() as fake:
        env = process_env(agent_env, fake, tmp_path / "data", claude_bin, workdir)
        bot = await _start_bot(tmp_path, env)
        try:
            await fake.user_message("/claude MARK-PENDING go", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
            allow = ask.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
            # the bot stores the message id a moment after Telegram accepted the message
            store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'data' / 'detach.sqlite'}")
            try:
                async with asyncio.timeout(10):
                    while (await store.questions.get(1)).message_id is None:
                        await asyncio.sleep(0.05)
            finally:
                await store.close()
            os.kill(bot.pid, signal.SIGKILL)
            await asyncio.wait_for(bot.wait(), 10)
            mark = len(fake.calls)
            bot = await _start_bot(tmp_path, env)
            edit = await fake.wait_call(
                "editMessageText",
                lambda c: int(c.params["message_id"]) == ask.result["message_id"],
                timeout_s=30,
                after=mark,
            )
            assert "bot restarted" in edit.params["text"] and "reply_markup" not in edit.params
            await fake.wait_text(OWNER, "restarted while these tasks were running", after=mark)
            query = await fake.press(OWNER, ask.result["message_id"], allow, OWNER)
            answer = await fake.wait_call(
                "answerCallbackQuery", lambda c: c.params["callback_query_id"] == query
            )
            assert answer.params["text"] == "This request has expired."
        finally:
            await stop_process(bot)
    assert not (workdir / "pending.txt").exists()
