"""After a Codex turn, what its sandbox left running is stopped: each orphaned process of ours
(its parent init or a subreaper above the bot) that is Codex's sandbox and names the turn's
directory; never one naming another path, nor one that is not Codex's sandbox (the owner's),
nor one whose parent still runs. At start, what a crashed run left is swept the same way."""

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


def _sandbox_like(bwrap: Path, *paths: Path, helper: str = "/x/codex-linux-sandbox") -> list[str]:
    """A look-alike of a leaked Codex sandbox: bubblewrap by name (``bwrap``: a link to
    python), binds of ``paths``, then Codex's ``helper``."""
    binds = [a for p in paths for a in ("--bind", str(p), str(p))]
    return [str(bwrap), "-c", SLEEPER, *binds, "--", helper, "--codex-run-as-fs-helper"]


@pytest.fixture
def bwrap(tmp_path: Path) -> Path:
    """python under the name of bubblewrap, for look-alikes of Codex's leaked sandboxes."""
    link = tmp_path / "bin" / "bwrap"
    link.parent.mkdir()
    link.symlink_to(sys.executable)
    return link


async def test_only_the_turns_orphans_are_killed(tmp_path: Path, bwrap: Path, started: list[int]):
    """Look-alikes: orphaned Codex sandboxes binding the turn's directory (or one inside it)
    are killed; one binding another directory (a sibling sharing its name's start), orphans
    naming the directory that are not Codex's sandbox (the owner's ``nohup``, one whose
    argument only contains the helper's name, bubblewrap without Codex's helper), and a
    sandbox whose parent runs (here: this process) are not."""
    cwd, sibling = tmp_path / "work", tmp_path / "work-other"
    env = {"PATH": os.environ["PATH"]}
    binding = _orphan(_sandbox_like(bwrap, cwd), env)
    inside = _orphan(_sandbox_like(bwrap, cwd / "sub"), env)
    elsewhere = _orphan(_sandbox_like(bwrap, sibling), env)
    owners = _orphan([sys.executable, "-c", SLEEPER, str(cwd)], env)
    notes = str(cwd / "notes" / "codex-linux-sandbox.md")
    by_word = _orphan([sys.executable, "-c", SLEEPER, "codex-linux-sandbox", notes], env)
    not_codex = _orphan(_sandbox_like(bwrap, cwd, helper=notes)[:-1], env)
    parented = subprocess.Popen(_sandbox_like(bwrap, cwd), env=env)  # its parent runs
    kept = [elsewhere, owners, by_word, not_codex]
    started += [binding, inside, *kept, parented.pid]
    assert all(stat_of(pid)[0] != os.getpid() for pid in (binding, inside, *kept))

    assert await orphans.ended(cwd) == 2
    assert await _gone(binding) and await _gone(inside)
    assert all(_alive(pid) for pid in kept) and parented.poll() is None
    parented.kill()
    parented.wait(5)


async def test_a_restart_sweeps_what_its_crashed_run_left_and_only_that(
    tmp_path: Path, workdir: Path, bwrap: Path, started: list[int]
):
    """The bot died mid-turn (no sweep at the turn's end): its next start kills the orphans of
    Codex's sandbox naming a directory its tasks may run in; one naming another is left."""
    from tests.support.fake_telegram import FakeTelegram
    from tests.support.harness import make_settings, running_bot

    environ = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    elsewhere_dir = tmp_path / "not-a-workdir"
    left = _orphan(_sandbox_like(bwrap, workdir / "task"))
    other = _orphan(_sandbox_like(bwrap, elsewhere_dir))
    started += [left, other]
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        async with running_bot(settings, environ):
            assert await _gone(left)
            assert _alive(other)


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
