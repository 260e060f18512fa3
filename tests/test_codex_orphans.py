"""After a Codex turn, what its sandbox left running is stopped: each orphaned process of ours
(its parent init or a subreaper above the bot) that names the turn's own TMPDIR, on its command
line or in its environment; never one naming another path, nor one whose parent still runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from bot.events import TurnFinished
from executors import orphans
from executors.codex import CodexExecutor
from executors.procs import stat_of
from tests.support.canaries import plant
from tests.support.openai_mock import OpenAIMock
from tests.test_claude_executor import Scripted

SLEEPER = "import time; time.sleep(120)"


def _orphan(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Start ``argv`` in a session of its own, double-forked: its parent exits at once, so it
    is reparented to init (or a subreaper above this process). Returns its pid."""
    shell = subprocess.run(
        ["sh", "-c", 'setsid "$@" >/dev/null 2>&1 </dev/null & echo $!', "sh", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    return int(shell.stdout)


def _alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for init to reap it)."""
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


@pytest.fixture
def started() -> Iterator[list[int]]:
    """The pids a test started: killed at its end, whatever happened (each still a sleeper)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(OSError):
            if SLEEPER.encode() in (Path("/proc") / str(pid) / "cmdline").read_bytes():
                os.kill(pid, signal.SIGKILL)


async def _gone(pid: int, within_s: float = 5) -> bool:
    async with asyncio.timeout(within_s):
        while _alive(pid):
            await asyncio.sleep(0.02)
    return True


async def test_only_the_turns_orphans_are_killed(tmp_path: Path, started: list[int]):
    """Look-alikes: orphans naming the turn's TMPDIR (argv, environment) are killed; an orphan
    naming another turn's and a process whose parent runs (here: this one) are not."""
    turn = orphans.turn_tmpdir({"TMPDIR": str(tmp_path)})
    other = orphans.turn_tmpdir({"TMPDIR": str(tmp_path)})
    env = {"PATH": os.environ["PATH"]}
    by_argv = _orphan([sys.executable, "-c", SLEEPER, f"--sandbox-policy-cwd={turn}"], env)
    by_tmpdir = _orphan([sys.executable, "-c", SLEEPER], {**env, "TMPDIR": str(turn / "x")})
    elsewhere = _orphan([sys.executable, "-c", SLEEPER, str(other)], {**env, "TMPDIR": str(other)})
    parented = subprocess.Popen(  # a live sandbox: its parent (here this process) still runs
        [sys.executable, "-c", SLEEPER, str(turn)], env={**env, "TMPDIR": str(turn)}
    )
    started += [by_argv, by_tmpdir, elsewhere, parented.pid]
    assert all(stat_of(pid)[0] != os.getpid() for pid in (by_argv, by_tmpdir, elsewhere))

    assert await orphans.ended(turn) == 2
    assert await _gone(by_argv) and await _gone(by_tmpdir)
    assert _alive(elsewhere) and parented.poll() is None
    assert not turn.exists() and other.exists()
    parented.kill()
    parented.wait(5)


def test_each_turn_gets_its_own_tmpdir_inside_the_environments(tmp_path: Path):
    env = {"TMPDIR": str(tmp_path)}
    first, second = orphans.turn_tmpdir(env), orphans.turn_tmpdir(env)
    assert first != second and first.parent == second.parent == tmp_path
    missing = orphans.turn_tmpdir({"TMPDIR": str(tmp_path / "gone")})  # the system's instead
    assert missing.is_dir() and missing.parent != tmp_path / "gone"
    missing.rmdir()


def _naming(root: Path) -> list[psutil.Process]:
    """Every process whose command line or environment names ``root``."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if str(root) in " ".join(proc.cmdline()) or str(root) in str(proc.environ()):
                found.append(proc)
    return found


TURNS = 3  # one sandboxed turn leaves a helper behind about one time in two (codex 0.171)


async def test_nothing_of_a_sandboxed_codex_turn_outlives_it(codex_bin: str):
    """Real sandboxed turns, each starting a burst of Codex's sandboxed file helpers (the
    profile's many denied paths): after each, no process names the turn's directories."""
    world, openai = plant(), OpenAIMock().start()
    try:
        openai.write_codex_home(world.home / ".codex")
        (world.root / "tmp").mkdir()
        env = world.env(
            CODEX_HOME=str(world.home / ".codex"), TMPDIR=str(world.root / "tmp"), MOCK_API_KEY="k"
        )
        executor = CodexExecutor(codex_bin, env)
        for turn in range(TURNS):
            openai.script(f"MARK-CORPHAN{turn}", [{"shell": "echo hi"}, {"text": "done"}])
            async with asyncio.timeout(60):
                events = [
                    e async for e in executor.run(world.spec(f"MARK-CORPHAN{turn} go"), Scripted())
                ]
            assert isinstance(events[-1], TurnFinished) and not events[-1].is_error, events[-1]
            assert _naming(world.root) == [], turn
    finally:
        openai.stop()
        for proc in _naming(world.root):
            with contextlib.suppress(psutil.Error):
                proc.kill()
        shutil.rmtree(world.root, ignore_errors=True)
