"""The process tree read from /proc: what ``stop_tree`` and the start-up sweep find and kill."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from executors.tree import TAG_ENV, Proc, _kill_all, descendants, kill_tagged

# a shell that starts a sleeper (its grandchild, for the test) and waits
NESTED = "sleep 30 & wait"


def _until(check, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def test_descendants_are_found_down_the_tree_and_killed_with_their_group():
    outer = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess; subprocess.run(['sh', '-c', '{NESTED}'])"],
        start_new_session=True,
    )
    try:
        assert _until(lambda: len(descendants(outer.pid)) == 2)  # sh, and sleep under it
        below = descendants(outer.pid)
        assert all(p.alive() for p in below)
        _kill_all(below)
        assert _until(lambda: not any(p.alive() and _running(p.pid) for p in below))
    finally:
        outer.kill()
        outer.wait()


def test_a_pid_seen_before_is_not_signalled_once_it_names_another_process():
    sleeper = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        seen = next(p for p in descendants(os.getpid()) if p.pid == sleeper.pid)
        reused = Proc(seen.pid, seen.started + 1)  # the same pid, started at another time
        assert seen.alive() and not reused.alive()
        _kill_all([reused])
        time.sleep(0.1)
        assert sleeper.poll() is None  # still running: the stale record was not acted on
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_sweep_kills_the_tagged_processes_only():
    tag = f"test-{os.getpid()}:7.1"
    env = {**os.environ, TAG_ENV: tag}
    tagged = subprocess.Popen(["sleep", "30"], env=env, start_new_session=True)
    other = subprocess.Popen(
        ["sleep", "30"], env={**os.environ, TAG_ENV: tag + "0"}, start_new_session=True
    )
    untagged = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert kill_tagged(tag, exact=True) == 1
        assert tagged.wait(timeout=5) == -9
        assert other.poll() is None and untagged.poll() is None
        assert kill_tagged(f"test-{os.getpid()}:") == 1  # a prefix: what a crashed run left
        assert other.wait(timeout=5) == -9 and untagged.poll() is None
    finally:
        for proc in (tagged, other, untagged):
            proc.kill()
            proc.wait()


def _running(pid: int) -> bool:
    """Not yet a zombie (a killed child stays one until its parent reaps it)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


async def test_an_agent_and_what_it_starts_run_nicer_than_the_bot(tmp_path):
    """``spawn(nice=7)``: the agent's process (the same pid: ``nice`` and ``setpriv`` exec it)
    and the tools it starts run 7 below the bot's priority, so the bot is not kept waiting."""
    from executors.process import spawn

    # field 19 of /proc/<pid>/stat is the nice value: the shell's own, then its child's
    probe = "cut -d' ' -f19 /proc/$$/stat; sh -c 'cut -d\" \" -f19 /proc/$$/stat'"
    proc = await spawn(["sh", "-c", probe], str(tmp_path), {"PATH": os.environ["PATH"]}, nice=7)
    out, _ = await proc.communicate()
    assert out.decode().split() == ["7", "7"]
    assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # the bot itself is left as it was
    plain = await spawn(["sh", "-c", probe], str(tmp_path), {"PATH": os.environ["PATH"]})
    out, _ = await plain.communicate()
    assert out.decode().split() == ["0", "0"]


async def test_a_cancel_while_the_process_is_being_created_stops_it(tmp_path):
    """The moment after the fork, while asyncio still connects the new process's pipes: a
    cancel there (a /cancel or a timeout that lands on the spawn) ends the spawn at once and
    leaves nothing running. asyncio's own handling of that cancel (CPython 3.11) kills only the
    leader and waits until every pipe closes, which the shell's `sleep` holds open: the turn
    could not end for as long as the child lived (here 60 s; the test waits 10)."""
    import asyncio

    from executors.process import spawn

    for _attempt in range(5):  # a loaded machine may finish the spawn before a pass sees it
        tag = f"test-spawn-cancel-{os.getpid()}-{time.monotonic_ns()}"
        env = {"PATH": os.environ["PATH"]}
        argv = ["sh", "-c", "sleep 60; true"]
        spawning = asyncio.create_task(spawn(argv, str(tmp_path), env, tag))
        try:
            # one pass of the loop at a time, until the fork is done: asyncio needs more
            # passes than one to connect the new process's pipes, so the cancel lands between
            for _ in range(10_000):
                await asyncio.sleep(0)
                if spawning.done() or _tagged(tag):
                    break
            if spawning.done():
                continue  # the window was missed: try again (the finally stops this one)
            spawning.cancel()
            done, _ = await asyncio.wait({spawning}, timeout=10)
            assert done, "the cancelled spawn did not end"
            assert spawning.cancelled()
            deadline = time.monotonic() + 5
            while _tagged(tag) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert not _tagged(tag), "the new process (or its child) outlived the cancelled spawn"
            return
        finally:
            kill_tagged(tag)
    pytest.fail("five spawns finished before a cancel could land in one")


def _tagged(tag: str) -> list[int]:
    """Live processes carrying ``tag`` in their environment (zombies do not count)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = open(f"/proc/{name}/environ", "rb").read()  # noqa: PTH123, SIM115
        except OSError:
            continue
        if f"{TAG_ENV}={tag}".encode() in environ.split(b"\0") and _running(int(name)):
            found.append(int(name))
    return found
