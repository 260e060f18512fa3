"""The PID namespace every agent runs in, so that none outlives the process that started it,
whatever it does to its environment or session: bubblewrap leaves the filesystem as it is
(``--dev-bind / /``) and gives the agent a PID namespace and a /proc of its own; its init dies
with its parent (``--die-with-parent``), and the kernel kills every process of a PID namespace
when its init dies. The agent is pid 2 there (``agent_of``): a stop's first signal goes to it,
since bubblewrap passes no signal on (it dies of it, and the namespace with it).

Where bubblewrap or user namespaces are missing (``problem``), agents run as before, and only
the watchdog's sweep of what carries the bot's run in its environment stops them."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from bot.models import Phrase
from executors.procs import PROC, Proc, stat_of

ARGS = ("--dev-bind", "/", "/", "--unshare-pid", "--die-with-parent", "--proc", "/proc", "--")
PROBE_TIMEOUT_S = 10.0
AGENT_NS_PID = 2  # bubblewrap's init is 1 in the namespace; the command it runs, 2


@functools.cache
def problem() -> Phrase | None:
    """Why agents cannot run in a PID namespace of their own here, or None (probed once)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Phrase("sandbox.bwrap_missing")
    try:  # user namespaces may be switched off (containers, hardened kernels)
        done = subprocess.run(
            [bwrap, *ARGS, "true"], capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Phrase("sandbox.bwrap_failed", {"detail": str(exc)})
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        return Phrase("sandbox.no_pid_namespace", {"detail": detail[-1] if detail else "–"})
    return None


def prefix() -> tuple[str, ...]:
    """What goes before an agent's argv to run it in a PID namespace; () where none works."""
    bwrap = shutil.which("bwrap")
    return () if bwrap is None or problem() is not None else (bwrap, *ARGS)


def agent_of(pid: int) -> Proc | None:
    """The command a bubblewrap ``pid`` runs in a PID namespace of its own (pid 2 there),
    None when ``pid`` is no bubblewrap or runs none (not yet, or no more)."""
    try:
        if os.path.basename(os.readlink(PROC / str(pid) / "exe")) != "bwrap":
            return None
    except OSError:
        return None
    depth = len(ns_pids(pid))
    for below in _children(pid, 2):
        found = ns_pids(below.pid)
        if len(found) == depth + 1 and found[-1] == AGENT_NS_PID:
            return below
    return None


def ns_pids(pid: int) -> list[int]:
    """``pid`` in each PID namespace it is in, from ours down (/proc's ``NSpid``)."""
    try:
        status = (PROC / str(pid) / "status").read_text()
    except OSError:
        return []
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return [int(field) for field in line.split()[1:]]
    return []


def _children(pid: int, levels: int) -> list[Proc]:
    """The processes up to ``levels`` below ``pid``."""
    parents = {pid}
    found: list[Proc] = []
    for _ in range(levels):
        level = []
        for other in os.listdir(PROC):
            if other.isdigit() and (seen := stat_of(int(other))) and seen[0] in parents:
                level.append(Proc(int(other), seen[1]))
        found += level
        parents = {p.pid for p in level}
    return found
