"""Agents in a PID namespace of their own (``executors.pidns``): nothing an agent starts outlives
the process that spawned it, a daemon that shed its environment and its session included; the
bot's own stop still reaches the agent with SIGINT first, through bubblewrap; the agent runs in
its directory and its exit code comes through."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from executors import pidns
from executors.process import spawn
from executors.tree import stop_tree

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(pidns.problem() is not None, reason="no PID namespace here")

# a daemon that sheds everything it can: its environment (RUN_ENV, the tag), its session
DAEMON = "env -i setsid sh -c 'exec sleep {marker}' </dev/null >/dev/null 2>&1 &"


def _env() -> dict[str, str]:
    return {"PATH": os.environ["PATH"]}


def _marker() -> str:
    """A sleep's argument no other process has: how a test finds its daemon from outside."""
    return f"600.{os.getpid()}{time.monotonic_ns() % 10**9}"


def _live(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if marker in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


async def _until(check, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.02)
    return check()


async def test_a_detached_daemon_dies_with_the_process_that_spawned_its_agent(tmp_path):
    """The spawner (a stand-in for the bot) is killed -9: the agent's daemon, which left its
    session and cleared its environment (no watchdog can find it), is gone with it."""
    marker = _marker()
    agent = f"{DAEMON.format(marker=marker)} sleep 600"
    spawner = subprocess.Popen(
        [sys.executable, "-c", _SPAWNER, agent, str(tmp_path)],
        cwd=ROOT,
        start_new_session=True,
    )
    try:
        assert await _until(lambda: _live(marker), 10), "the daemon never started"
        assert "DETACH_AGENT_RUN" not in _live(marker)[0].environ()  # no sweep finds it
        spawner.kill()
        spawner.wait(5)
        assert await _until(lambda: not _live(marker), 5), "the daemon outlived the spawner"
    finally:
        spawner.kill()
        spawner.wait()
        for proc in _live(marker):
            proc.kill()


_SPAWNER = """
import asyncio, sys
from executors.process import spawn
async def main():
    proc = await spawn(["sh", "-c", sys.argv[1]], sys.argv[2], {"PATH": "/usr/bin:/bin"}, "t:1")
    await proc.wait()
asyncio.run(main())
"""


async def test_the_first_signal_of_a_stop_reaches_the_agent_inside(tmp_path):
    """SIGINT (Claude's stop) is the agent's to handle: it writes its last words and exits
    within the grace; bubblewrap would otherwise die of it and take the agent down unwarned."""
    log = tmp_path / "signals.log"
    handler = f"trap 'echo INT >> {log}; sleep 0.2; echo done >> {log}; exit 0' INT"
    proc = await spawn(
        ["sh", "-c", f"{handler}; touch {log}; sleep 30 & wait"], str(tmp_path), _env()
    )
    assert await _until(log.exists, 5)
    assert pidns.agent_of(proc.pid) is not None  # the shell, pid 2 of its namespace
    began = time.monotonic()
    await stop_tree(proc, 5.0, signal.SIGINT)
    assert log.read_text() == "INT\ndone\n"
    assert time.monotonic() - began < 3  # it exited by itself, not at the grace's end
    assert proc.returncode == 0


async def test_the_agent_runs_in_its_directory_and_its_exit_code_comes_through(tmp_path):
    proc = await spawn(["sh", "-c", "pwd; echo $$; exit 3"], str(tmp_path), _env())
    out, _ = await proc.communicate()
    where, pid = out.decode().split()
    assert Path(where) == tmp_path and pid == "2"  # pid 2: in a namespace of its own
    assert proc.returncode == 3
