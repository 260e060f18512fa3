"""An agent's process chain started ahead (``executors.ahead``): what runs through it is what a
cold spawn runs, to the signal dispositions and descriptors; it is used only for the same
chain; it holds nothing of a task while it waits; nothing of it outlives its close or its
wait; and the bot gives its turns' agents one (``DETACH_SPAWN_AHEAD``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from executors.ahead import SpawnAhead
from executors.process import spawn
from executors.procs import RUN_ENV, this_run
from executors.tree import TAG_ENV, descendants
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

pytestmark = pytest.mark.skipif(shutil.which("perl") is None, reason="no perl: spawns are cold")

WAIT_S = 10.0
# what an agent sees of its own start: everything a chain or a gate could change
PROBE = r"""
import ctypes, json, os, resource, sys
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines()
              if ":\t" in line)
keys = ("SigIgn", "SigBlk", "SigCgt", "NoNewPrivs", "Seccomp", "CapInh", "CapPrm", "CapEff",
        "CapBnd", "CapAmb", "NSpid")
libc = ctypes.CDLL(None, use_errno=True)
death = ctypes.c_int(0)
libc.prctl(2, ctypes.byref(death), 0, 0, 0)  # PR_GET_PDEATHSIG
umask = os.umask(0); os.umask(umask)
print(json.dumps({
    "argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(),
    "status": {k: status.get(k, "").strip() for k in keys}, "pdeathsig": death.value,
    "nice": os.getpriority(os.PRIO_PROCESS, 0), "fds": sorted(os.listdir("/proc/self/fd")),
    "umask": umask, "nofile": resource.getrlimit(resource.RLIMIT_NOFILE),
    "session_leader": os.getsid(0) == os.getpid(), "stdin": sys.stdin.readline(),
}), flush=True)
"""


async def _seen(proc: asyncio.subprocess.Process) -> dict[str, object]:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"the prompt, after the gate's header\n")
    await proc.stdin.drain()
    async with asyncio.timeout(WAIT_S):
        out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


def _argv(tmp_path: Path) -> tuple[list[str], str, dict[str, str]]:
    """A probe, and a directory reached through a link (bubblewrap's ``PWD`` is its real path)."""
    (tmp_path / "work dir").mkdir(exist_ok=True)
    if not (tmp_path / "linked").exists():
        (tmp_path / "linked").symlink_to(tmp_path / "work dir")
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "EMPTY": "",
        "MULTI": "two\nlines = and equals",
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",  # else Python's probe sets LC_CTYPE in its own environment
    }
    return [sys.executable, "-c", PROBE, "an arg", ""], str(tmp_path / "linked"), env


@contextlib.asynccontextmanager
async def _waiting(
    tmp_path: Path, nice: int, wait_s: int = 600
) -> AsyncIterator[tuple[SpawnAhead, list[str], str, dict[str, str]]]:
    """A chain ahead for ``nice``, waiting, with the probe's argv, directory and environment;
    closed after."""
    argv, cwd, env = _argv(tmp_path)
    ahead = SpawnAhead(wait_s=wait_s)
    try:
        await ahead.run(argv, cwd, env, nice)
        await _ready(ahead, nice)
        yield ahead, argv, cwd, env
    finally:
        await ahead.aclose()


async def _ready(ahead: SpawnAhead, nice: int) -> None:
    """A chain for ``nice`` waits (the first ``run`` finds none and starts one)."""
    async with asyncio.timeout(WAIT_S):
        await ahead.settled()
    assert ahead.waiting is not None


async def test_an_agent_through_the_chain_ahead_sees_what_a_cold_spawn_shows(tmp_path):
    argv, cwd, env = _argv(tmp_path)
    ahead = SpawnAhead()
    try:
        assert await ahead.run(argv, cwd, env, 7) is None  # none waits yet: one is started
        await _ready(ahead, 7)
        waiting = ahead.waiting
        warm = await spawn(argv, cwd, env, "t:ahead.1", 7, ahead=ahead)
        assert warm is waiting and ahead.given is warm
        cold = await spawn(argv, cwd, env, "t:ahead.1", 7)
        seen_warm, seen_cold = await _seen(warm), await _seen(cold)
    finally:
        await ahead.aclose()
    assert seen_warm == seen_cold
    assert seen_warm["argv"][1:] == ["an arg", ""]
    assert seen_warm["cwd"] == os.path.realpath(cwd)
    assert seen_warm["nice"] == os.getpriority(os.PRIO_PROCESS, 0) + 7
    tagged = {**env, TAG_ENV: "t:ahead.1", RUN_ENV: this_run()}
    assert {k: v for k, v in seen_warm["env"].items() if k != "PWD"} == tagged
    assert seen_warm["stdin"] == "the prompt, after the gate's header\n"


async def test_a_chain_of_another_priority_is_stopped_and_the_spawn_is_cold(tmp_path):
    async with _waiting(tmp_path, 5) as (ahead, argv, cwd, env):
        other = ahead.waiting
        assert other is not None
        assert await ahead.run(argv, cwd, env, 6) is None  # not for nice 6: stopped, cold
        async with asyncio.timeout(WAIT_S):
            assert await other.wait() == 0  # its gate ran nothing: stdin closed, it exits
        await _ready(ahead, 6)
        proc = await ahead.run(argv, cwd, env, 6)
        assert proc is not None
        assert (await _seen(proc))["nice"] == os.getpriority(os.PRIO_PROCESS, 0) + 6


async def test_what_a_cold_spawn_refuses_is_left_to_it(tmp_path):
    async with _waiting(tmp_path, 3) as (ahead, argv, cwd, env):
        waiting = ahead.waiting
        for bad in (
            (["no-such-agent-binary"], cwd, env),
            ([str(tmp_path)], cwd, env),  # a directory
            (argv, str(tmp_path / "gone"), env),
            (argv, cwd, {**env, "NUL": "a\0b"}),
            ([*argv, "a\0b"], cwd, env),
            (["python3"], cwd, {**env, "PATH": f"bin:{env['PATH']}"}),  # searched from cwd
            (["bin/python3"], cwd, env),
            (argv, cwd, {**env, "PWD": cwd}),  # through the link: bubblewrap would keep it
            ([*argv, "x" * os.sysconf("SC_ARG_MAX")], cwd, env),
        ):
            assert await ahead.run(*bad, 3) is None, bad
            assert ahead.waiting is waiting  # left waiting for the next spawn
        await _ready(ahead, 3)
        waiting = ahead.waiting
        # cold, as without a chain ahead: its `nice` starts, and says what it could not run
        proc = await spawn(["no-such-agent-binary"], cwd, env, "t:ahead.2", 3, ahead=ahead)
        assert proc is not waiting and ahead.given is None and ahead.waiting is waiting
        async with asyncio.timeout(WAIT_S):
            _, err = await proc.communicate()
        assert proc.returncode != 0 and b"no-such-agent-binary" in err


async def test_a_waiting_chain_holds_nothing_of_a_task_and_ends_with_its_close(tmp_path):
    argv, cwd, env = _argv(tmp_path)
    ahead = SpawnAhead()
    await ahead.run(argv, cwd, {**env, "SECRET": "s3cr3t-of-the-task"}, 4)
    await _ready(ahead, 4)
    waiting = ahead.waiting
    assert waiting is not None
    async with asyncio.timeout(WAIT_S):  # bubblewrap, its init, and the gate, once up
        while len(chain := [waiting.pid, *(p.pid for p in descendants(waiting.pid))]) < 3:
            await asyncio.sleep(0.01)
    for pid in chain:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        # bubblewrap sets PWD for what it runs (here /)
        assert [e for e in environ if e and e != b"PWD=/"] == [f"{RUN_ENV}={this_run()}".encode()]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert b"s3cr3t" not in cmdline and str(tmp_path).encode() not in cmdline
    await ahead.aclose()
    assert waiting.returncode is not None
    async with asyncio.timeout(WAIT_S):  # the namespace's own die with the outer bubblewrap
        while [pid for pid in chain if Path(f"/proc/{pid}").exists() and not _zombie(pid)]:
            await asyncio.sleep(0.01)
    assert await ahead.run(argv, cwd, env, 4) is None  # closed: no chain is started any more
    assert ahead.waiting is None


async def test_a_chain_nobody_takes_ends_by_itself(tmp_path):
    async with _waiting(tmp_path, 2, wait_s=1) as (ahead, argv, cwd, env):
        waiting = ahead.waiting
        assert waiting is not None
        async with asyncio.timeout(WAIT_S):
            await waiting.wait()  # the gate's alarm
        assert await ahead.run(argv, cwd, env, 2) is None  # gone: the spawn is cold


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


@pytest.mark.parametrize("on", [True, False], ids=["ahead", "off"])
async def test_the_bot_starts_the_next_turns_agent_through_its_chain_ahead(
    tmp_path, claude_bin, agent_env, anthropic, workdir, caplog, on
):
    anthropic.script("AHEAD-ONE", [{"text": "first task done"}])
    anthropic.script("AHEAD-TWO", [{"text": "second task done"}])
    caplog.set_level(logging.INFO, logger="executors.process")
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, spawn_ahead=on)
        async with running_bot(settings, agent_env):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude AHEAD-ONE first", OWNER)
            await fake.wait_text(OWNER, "first task done", timeout_s=60)
            mark = len(fake.calls)
            await fake.user_message("/claude AHEAD-TWO second", OWNER)
            await fake.wait_text(OWNER, "second task done", timeout_s=60, after=mark)
    started = [r.getMessage() for r in caplog.records if " claude pid " in r.getMessage()]
    ahead = [line for line in started if line.endswith(" started ahead")]
    assert len(ahead) == (1 if on else 0), started
    assert sum(line.endswith(" started") for line in started) == (1 if on else 2), started


async def test_a_chain_that_died_waiting_is_not_given_the_agent(tmp_path):
    """A chain killed while it waited (not yet reaped: its return code unknown) never says it
    entered the directory: the spawn is cold, and nothing of the dead one is left."""
    async with _waiting(tmp_path, 1) as (ahead, argv, cwd, env):
        waiting = ahead.waiting
        assert waiting is not None
        async with asyncio.timeout(WAIT_S):  # its gate, once up
            while not (gate := [p for p in descendants(waiting.pid) if _name(p.pid) == "perl"]):
                await asyncio.sleep(0.01)
        os.kill(gate[0].pid, signal.SIGKILL)
        assert await ahead.run(argv, cwd, env, 1) is None
        assert ahead.given is None
        async with asyncio.timeout(WAIT_S):
            await waiting.wait()
