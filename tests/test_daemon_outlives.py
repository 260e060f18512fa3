"""No agent outlives its bot, whatever it does to its environment (issue #51): the real bot
(``python -m bot run``) against the fake Bot API, a ``/local`` task against the scripted OpenAI
server whose ``run`` command starts a daemon with ``env -i setsid`` (no environment left for the
watchdog's sweep, a session of its own) and keeps running; the bot is killed -9 alone (not its
group; no systemd): the daemon is gone within seconds. In ``auto`` mode by the PID namespace
every agent process runs in (``executors.pidns``), in ``sandbox`` mode by Detach's own
bubblewrap (its PID namespace, already)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from executors import pidns
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, process_env, stop_process
from tests.support.machine import path_without_bwrap

GONE_WITHIN_S = 5
ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(pidns.problem() is not None, reason="no PID namespace here")


def _marker() -> str:
    """A sleep's argument no other process has: the daemon, found from outside."""
    return f"600.{os.getpid()}{time.monotonic_ns() % 10**9}"


# the daemon: no environment (no RUN_ENV, no tag), its own session; the command runs on
SETSID = "env -i setsid sh -c 'exec sleep {}' </dev/null >/dev/null 2>&1 & sleep 600"
# the same done by the daemon itself: Claude's sandbox asks before running `setsid` (2.1.197)
FORKED = (
    "env -i /usr/bin/python3 -c 'import os; os.fork() and os._exit(0); os.setsid(); "
    'os.execv("/bin/sleep", ["sleep", "{}"])\' </dev/null >/dev/null 2>&1; sleep 600'
)


def _daemons(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if marker in (proc.info["cmdline"] or []) and proc.info["status"] != "zombie":
            found.append(proc)
    return found


async def _until(check, timeout_s: float) -> float:
    began = time.monotonic()
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.05)
    return time.monotonic() - began


async def _gone_after_kill_9(
    tmp_path: Path, command: str, env: dict[str, str], plant: Callable[[str], None]
) -> float:
    """The bot runs the task ``command`` asks for, whose model ``plant`` scripts to start a
    daemon named by a marker (``run``, Bash); the bot is killed -9 while that command runs:
    seconds until the daemon is gone."""
    marker = _marker()
    plant(marker)
    bot = None
    try:
        async with FakeTelegram() as fake:
            bot = await _start_bot(tmp_path, fake, env)
            await fake.wait_call("setMyCommands", timeout_s=60)
            await fake.user_message(command, OWNER)
            await _until(lambda: _daemons(marker), 60)
            assert "DETACH_AGENT_RUN" not in _daemons(marker)[0].environ()

            os.kill(bot.pid, signal.SIGKILL)  # the bot alone, not its group
            assert await asyncio.wait_for(bot.wait(), 10) == -9
            return await _until(lambda: not _daemons(marker), GONE_WITHIN_S)
    finally:
        if bot is not None:
            await stop_process(bot)
        for proc in _daemons(marker):
            proc.kill()


@pytest.mark.parametrize("mode", ["auto", "sandbox"])
async def test_a_local_tasks_daemon_dies_with_a_killed_bot(tmp_path, mode):
    """``/local``: in auto mode its command runs in the agents' PID namespace; in sandbox mode
    in Detach's bubblewrap, which has its own."""
    chat = ChatMock().start()

    def plant(marker: str) -> None:
        run = {"command": SETSID.format(marker)}
        chat.script("MARK-DAEMON", [{"tools": [{"name": "run", "args": run}]}])

    try:
        env = {
            "DETACH_DEFAULT_ENGINE": "local",
            "DETACH_LOCAL_BASE_URL": chat.base_url,
            "DETACH_LOCAL_MODEL": "m",
            "DETACH_CLAUDE_BIN": "/nonexistent/claude",
        }
        took_s = await _gone_after_kill_9(
            tmp_path, f"/local mode={mode} MARK-DAEMON go", env, plant
        )
    finally:
        chat.stop()
    print(f"local {mode}: the daemon was gone {took_s:.2f} s after the bot's kill -9")


@pytest.mark.parametrize("mode", ["auto", "sandbox"])
async def test_a_claude_tasks_daemon_dies_with_a_killed_bot(
    tmp_path, mode, claude_bin, agent_env, anthropic
):
    """The real Claude Code: its Bash in auto mode (no sandbox of its own), and in sandbox mode
    inside its own bubblewrap (which asks before a ``setsid``: the daemon leaves its session
    itself), nested in the agents' PID namespace."""

    def plant(marker: str) -> None:
        daemon = (FORKED if mode == "sandbox" else SETSID).format(marker)
        bash = {"command": daemon, "description": "d", "timeout": 600000}
        anthropic.script("MARK-DAEMON", [{"tool_use": {"name": "Bash", "input": bash}}])

    env = {**agent_env, "DETACH_CLAUDE_BIN": claude_bin}
    took_s = await _gone_after_kill_9(tmp_path, f"/claude mode={mode} MARK-DAEMON go", env, plant)
    print(f"claude {mode}: the daemon was gone {took_s:.2f} s after the bot's kill -9")


async def _start_bot(
    tmp_path: Path, fake: FakeTelegram, extra: dict[str, str]
) -> asyncio.subprocess.Process:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    workdir = tmp_path / "work"
    workdir.mkdir(exist_ok=True)
    agent = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    env = process_env(agent, fake, tmp_path / "data", "", workdir)
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    env.update(extra)
    env["PYTHONPATH"] = str(ROOT)  # this checkout's bot, whichever one the environment installed
    log = open(tmp_path / "bot.log", "ab")  # noqa: SIM115 (the child owns it)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", cwd=tmp_path, env=env, stdout=log, stderr=log
    )


async def test_status_says_whether_an_agent_can_outlive_the_bot(tmp_path):
    """With the namespace, /status says so; on a machine without bubblewrap it says agents may
    outlive a ``kill -9`` (the watchdog then stops only what kept the bot's run in its
    environment), and that the bot's own git is not confined."""
    seen = {}
    for name, path in (("with", "/usr/local/bin:/usr/bin:/bin"), ("without", None)):
        where = tmp_path / name
        where.mkdir()
        path = path or path_without_bwrap(where)
        async with FakeTelegram() as fake:
            bot = await _start_bot(where, fake, {"PATH": path, "DETACH_CLAUDE_BIN": "/nonexistent"})
            try:
                await fake.wait_call("setMyCommands", timeout_s=60)
                await fake.user_message("/status", OWNER)
                seen[name] = (await fake.wait_text(OWNER, "agents:", timeout_s=30)).params["text"]
            finally:
                await stop_process(bot)
    assert "agents: each in a PID namespace that dies with the bot" in seen["with"]
    assert "agents: may outlive a kill -9 of the bot (bubblewrap not installed" in seen["without"]
    # and whether the bot's own git in task directories runs confined
    assert (
        "the bot&#x27;s git: confined" in seen["with"] or "the bot's git: confined" in seen["with"]
    )
    assert "git: NOT confined" in seen["without"]
