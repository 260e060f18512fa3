"""Processes as /proc shows them (Linux, where the bot runs): a process is its pid with its
start time, so a pid the system gave to another process since it was seen is never signalled;
and the variables that mark an agent's processes in their environment. Only the standard
library's ``os``, ``signal`` and ``pathlib`` (no asyncio): the agents' watchdog
(``executors.watchdog``) runs with this alone.

psutil did this before; importing it, and the process objects its iterator keeps, cost the
idle bot 1.3 MB and ~10 ms of its start."""

from __future__ import annotations

import contextlib
import functools
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
# ... and this one (``<pid>.<start time>`` of the bot or worker that started it): when that
# process dies, however, its watchdog stops every process carrying it.
RUN_ENV = "DETACH_AGENT_RUN"
PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Proc:
    pid: int
    started: int  # /proc/<pid>/stat's starttime (ticks since boot): with the pid, one process

    def alive(self) -> bool:
        """Still this process (not exited and reaped, its pid not given to another)."""
        found = stat_of(self.pid)
        return found is not None and found[1] == self.started


def stat_of(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of ``pid``; None when it is gone."""
    try:
        data = (PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # after "pid (comm) ": state, ppid, …
    return int(fields[1]), int(fields[19])  # ppid (field 4), starttime (field 22)


def all_pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir(PROC) if name.isdigit()]
    except OSError:
        return []


@functools.cache
def this_run() -> str:
    """This process as RUN_ENV names it: its pid and start time (unique while the machine runs)."""
    found = stat_of(os.getpid())
    return f"{os.getpid()}.{found[1] if found else 0}"


def kill_tagged(tag: str, *, exact: bool = False, name: str = TAG_ENV) -> int:
    """SIGKILL every process of ours whose environment carries ``name`` (TAG_ENV) equal to
    ``tag`` (or, without ``exact``, starting with it); returns how many. At start, the bot
    passes its owner prefix to stop what a crashed run left behind."""
    me = os.getpid()
    killed = 0
    for pid in all_pids():
        if pid == me:
            continue
        value = env_of(pid, name)
        if value is not None and (value == tag if exact else value.startswith(tag)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
    if killed:
        log.info("stopped %s left-behind agent process(es) tagged %s", killed, tag)
    return killed


def env_of(pid: int, name: str = TAG_ENV) -> str | None:
    """``pid``'s variable ``name``, None when it has none or cannot be read (another user's,
    gone)."""
    try:
        environ = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return None
    prefix = name.encode() + b"="
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace")
    return None
