"""Stopping an agent's whole process tree: the agent, every process group below it, and every
process carrying the turn's tag, also after the bot died.

Processes are read from /proc (Linux, where the bot runs): a process is its pid with its start
time, so a pid the system gave to another process since it was seen is never signalled. psutil
did this before; importing it, and the process objects its iterator keeps, cost the idle bot
1.3 MB and ~10 ms of its start."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

# Every process of a turn carries this variable (``<owner>:<turn id>``): a daemon that left the
# agent's process group and session still has it, so it is found and stopped with the turn, and
# at the next start when the bot died.
TAG_ENV = "DETACH_AGENT_TAG"
_TAG_PREFIX = TAG_ENV.encode() + b"="
_SWEEPS: set[asyncio.Future[int]] = set()  # tag sweeps under way (kept from being collected)
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    started: int  # /proc/<pid>/stat's starttime (ticks since boot): with the pid, one process

    def alive(self) -> bool:
        """Still this process (not exited and reaped, its pid not given to another)."""
        found = _stat(self.pid)
        return found is not None and found[1] == self.started


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of ``pid``; None when it is gone."""
    try:
        data = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # after "pid (comm) ": state, ppid, …
    return int(fields[1]), int(fields[19])  # ppid (field 4), starttime (field 22)


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return []


def descendants(pid: int) -> list[Proc]:
    """Every process below ``pid`` (children, theirs, …), as they are now."""
    children: dict[int, list[Proc]] = {}
    for other in _pids():
        found = _stat(other)
        if found is not None:
            children.setdefault(found[0], []).append(Proc(other, found[1]))
    below: list[Proc] = []
    todo = [pid]
    while todo:
        for child in children.pop(todo.pop(), []):
            below.append(child)
            todo.append(child.pid)
    return below


async def exited(proc: asyncio.subprocess.Process, every_s: float = 0.1) -> None:
    """Until the process exited: at once in the usual case (``proc.wait()``), and within
    ``every_s`` when a child it left holds a pipe open (on Python 3.11 ``wait()`` also waits for
    every pipe to close)."""
    waiter = asyncio.ensure_future(proc.wait())
    try:
        while proc.returncode is None and not waiter.done():
            await asyncio.wait({waiter}, timeout=every_s)
    finally:
        waiter.cancel()


async def wait_exit(proc: asyncio.subprocess.Process, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for the agent to exit; False if it still runs."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(exited(proc), timeout_s)
    return proc.returncode is not None


async def stop_tree(
    proc: asyncio.subprocess.Process,
    grace_s: float,
    first: signal.Signals = signal.SIGINT,
    tag: str | None = None,
) -> None:
    """``first`` (Claude: SIGINT, it stops its own tools and exits), then after ``grace_s``
    SIGKILL the agent, every process group below it (tool shells are session leaders) and
    every process carrying the turn's ``tag`` (daemons that left the tree)."""
    await _stop_agent(proc, grace_s, first)
    if tag:  # a /proc scan: in the background, so the turn's answer does not wait for it
        sweep = asyncio.ensure_future(asyncio.to_thread(kill_tagged, tag, exact=True))
        _SWEEPS.add(sweep)
        sweep.add_done_callback(_SWEEPS.discard)


async def _stop_agent(
    proc: asyncio.subprocess.Process, grace_s: float, first: signal.Signals
) -> None:
    if proc.returncode is not None:
        _kill_all(descendants(proc.pid))
        return
    tree = {p.pid: p for p in descendants(proc.pid)}
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(first)
    deadline = asyncio.get_running_loop().time() + grace_s
    while proc.returncode is None and asyncio.get_running_loop().time() < deadline:
        # what it starts while stopping (or had just started) is part of the tree too
        tree.update((p.pid, p) for p in descendants(proc.pid))
        await asyncio.sleep(0.05)
    if proc.returncode is None:
        log.info(
            "agent pid %s ignored %s for %.1fs; killing its tree", proc.pid, first.name, grace_s
        )
    tree.update((p.pid, p) for p in descendants(proc.pid))
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    _kill_all(list(tree.values()))
    await wait_exit(proc, grace_s)


def _kill_all(procs: list[Proc]) -> None:
    """SIGKILL each process still alive and its process group (never the bot's own group)."""
    own_group = os.getpgrp()
    for child in procs:
        if not child.alive():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(child.pid)
            if group != own_group:
                os.killpg(group, signal.SIGKILL)
        if child.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child.pid, signal.SIGKILL)


def kill_tagged(tag: str, *, exact: bool = False) -> int:
    """SIGKILL every process of ours whose environment carries TAG_ENV equal to ``tag`` (or,
    without ``exact``, starting with it); returns how many. At start, the bot passes its owner
    prefix to stop what a crashed run left behind."""
    me = os.getpid()
    killed = 0
    for pid in _pids():
        if pid == me:
            continue
        value = _tag_of(pid)
        if value is not None and (value == tag if exact else value.startswith(tag)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    if killed:
        log.info("stopped %s left-behind agent process(es) tagged %s", killed, tag)
    return killed


def _tag_of(pid: int) -> str | None:
    """``pid``'s TAG_ENV, None when it has none or cannot be read (another user's, gone)."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    for item in environ.split(b"\0"):
        if item.startswith(_TAG_PREFIX):
            return item[len(_TAG_PREFIX) :].decode(errors="replace")
    return None
