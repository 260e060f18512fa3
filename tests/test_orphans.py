"""No agent outlives its bot: ``kill -9`` of the bot alone (not its process group; no systemd to
clean up) while its agent ignores SIGINT and a daemon the agent double-forked (its own session)
runs: both are gone within seconds (the agent by its parent-death signal, SIGKILL; the daemon
by the bot's watchdog, which finds it by the bot's run in its environment). The same for a
scale-out worker. A clean stop still goes through SIGINT first."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import psutil

from tests.support import fake_claude
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, process_env, running_bot, stop_process
from tests.support.postgres import postgres_database
from tests.support.processes import daemons_of
from tests.support.workers import Worker, worker_env

GONE_WITHIN_S = 10


def _agent_env(tmp_path: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}


async def _start_bot(tmp_path: Path, env: dict[str, str]) -> asyncio.subprocess.Process:
    log = open(tmp_path / "bot.log", "ab")  # noqa: SIM115 (the child owns it)
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "run", cwd=tmp_path, env=env, stdout=log, stderr=log
    )


def _stand_ins(pid: int) -> list[psutil.Process]:
    """The stand-in agents (not their version probes) below ``pid``."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            argv = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        if "fake-claude" in " ".join(argv) and "--version" not in argv:
            found.append(child)
    return found


async def _agent_and_daemon(pid: int) -> list[psutil.Process]:
    """The running agent below ``pid`` and the daemon it forked (not another test's)."""
    async with asyncio.timeout(30):
        while True:
            agents = _stand_ins(pid)
            daemons = daemons_of(pid)
            if agents and daemons:
                return [*agents, *daemons]
            await asyncio.sleep(0.1)


async def _all_gone(procs: list[psutil.Process], timeout_s: float) -> float:
    """Seconds until none of ``procs`` runs (a zombie waiting for its reaper counts as gone)."""
    began = asyncio.get_running_loop().time()
    async with asyncio.timeout(timeout_s):
        while any(_running(p) for p in procs):
            await asyncio.sleep(0.05)
    return asyncio.get_running_loop().time() - began


async def _said(log: Path, words: str, timeout_s: float = 10) -> None:
    """Until ``log`` holds ``words`` (the watchdog's line comes after its last scan)."""
    async with asyncio.timeout(timeout_s):
        while words not in log.read_text(errors="replace"):
            await asyncio.sleep(0.05)


def _running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _kill_leftovers(procs: list[psutil.Process]) -> None:
    for proc in procs:
        if _running(proc):
            proc.kill()


async def test_kill_9_of_the_bot_alone_leaves_no_agent_and_no_daemon(tmp_path, workdir):
    async with FakeTelegram() as fake:
        env = process_env(
            _agent_env(tmp_path), fake, tmp_path / "data", fake_claude.script(tmp_path), workdir
        )
        bot = await _start_bot(tmp_path, env)
        procs: list[psutil.Process] = []
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            await fake.user_message("/detach STUBBORN DAEMON ignore SIGINT, fork away", OWNER)
            procs = await _agent_and_daemon(bot.pid)
            assert all(_running(p) for p in procs)

            os.kill(bot.pid, signal.SIGKILL)  # the bot alone, not its group
            assert await asyncio.wait_for(bot.wait(), 10) == -9

            took_s = await _all_gone(procs, GONE_WITHIN_S)
            await _said(tmp_path / "bot.log", f"detach watchdog: pid {bot.pid} is gone; stopped ")
        finally:
            await stop_process(bot)
            _kill_leftovers(procs)
    print(f"agent and daemon gone {took_s:.2f} s after the bot's kill -9")


async def test_a_clean_stop_still_sends_sigint_first(tmp_path, workdir):
    """SIGTERM to the bot (systemd's stop): the agent gets SIGINT (the bot's own stop), not the
    parent-death SIGKILL, and the watchdog sweeps nothing."""
    async with FakeTelegram() as fake:
        env = process_env(
            _agent_env(tmp_path), fake, tmp_path / "data", fake_claude.script(tmp_path), workdir
        )
        bot = await _start_bot(tmp_path, env)
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            await fake.user_message("/detach HANG RECORD wait for a signal", OWNER)
            async with asyncio.timeout(30):  # the stand-in runs and listens for its signal
                while not (_stand_ins(bot.pid) and (tmp_path / "signals.ready").exists()):
                    await asyncio.sleep(0.1)
            bot.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(bot.wait(), 30) == 0
        finally:
            await stop_process(bot)
    assert (tmp_path / "signals.log").read_text() == "SIGINT\n"
    assert "detach watchdog" not in (tmp_path / "bot.log").read_text()


async def test_kill_9_of_a_worker_alone_leaves_no_agent_and_no_daemon(tmp_path, agent_env, workdir):
    fake_bin = fake_claude.script(tmp_path)
    async with postgres_database() as url, FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, fake_bin, workdir, role="front", database_url=url
        )
        worker = Worker(
            "w1",
            worker_env(agent_env, url, tmp_path / "w1", fake_bin, workdir),
            tmp_path / "w1.log",
        )
        procs: list[psutil.Process] = []
        async with running_bot(settings, agent_env):
            try:
                await worker.start()
                await worker.ready()
                assert worker.proc is not None
                await fake.user_message("/claude mode=auto STUBBORN DAEMON fork away", OWNER)
                procs = await _agent_and_daemon(worker.proc.pid)

                os.kill(worker.proc.pid, signal.SIGKILL)  # the worker alone
                await asyncio.wait_for(worker.proc.wait(), 10)

                await _all_gone(procs, GONE_WITHIN_S)
                await _said(worker.log, f"detach watchdog: pid {worker.proc.pid} is gone; stopped ")
            finally:
                await worker.stop()
                _kill_leftovers(procs)
