"""What Codex's sandbox leaves running after a turn, found and stopped (processes as /proc shows
them: ``executors.procs``).

Codex 0.171's sandbox helper (``codex-linux-sandbox``: bubblewrap with ``--new-session`` and
``--unshare-pid``, its environment cleared to PATH and TMPDIR) sometimes leaves its bubblewrap
child behind: pid 1 of its own pid namespace, never exec'd, waiting for ever, reparented to
init. Measured: in the burst of sandboxed file helpers (``--codex-run-as-fs-helper``) Codex
starts at ``thread/start``, mid-turn, seconds before a turn that ends normally (the app-server
exits on end-of-file, rc 0, no SIGTERM from us): not our stop path. It escapes the stop of the
agent's tree (its own session, no longer below the agent) and the tag sweep (Codex cleared the
tag from its environment). What still names it is the turn's TMPDIR (its environment, and its
command line where a sandbox binds it): each turn gets a TMPDIR of its own (``turn_tmpdir``),
and after the turn every orphan of ours naming it is killed and the directory removed
(``ended``)"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path

from executors.procs import PROC, all_pids, env_of, stat_of

log = logging.getLogger(__name__)

PREFIX = "detach-turn-"
SWEEP_WAIT_S = 5.0  # a /proc read stuck on a process in uninterruptible sleep: not the turn's


def turn_tmpdir(env: Mapping[str, str]) -> Path:
    """A fresh directory for one turn's TMPDIR, inside the environment's own TMPDIR (else the
    system's when it names none that exists): never a parent of CODEX_HOME, and unique to the
    turn while it exists."""
    base = env.get("TMPDIR")
    return Path(tempfile.mkdtemp(prefix=PREFIX, dir=base if base and Path(base).is_dir() else None))


def _ancestors() -> set[int]:
    """This process's ancestors (not itself), init included: where an orphan of ours lands (init,
    or a subreaper above us)."""
    found: set[int] = set()
    pid = os.getppid()
    while pid > 0 and pid not in found:
        found.add(pid)
        parent = stat_of(pid)
        pid = parent[0] if parent else 0
    return found | {1}


def _names(pid: int, mark: str) -> bool:
    """``pid``'s command line names ``mark``, or its TMPDIR is ``mark`` (or inside it)."""
    try:
        if mark.encode() in (PROC / str(pid) / "cmdline").read_bytes():
            return True
    except OSError:
        return False
    tmpdir = env_of(pid, "TMPDIR")
    return tmpdir is not None and (tmpdir == mark or tmpdir.startswith(mark + "/"))


def sweep(mark: str) -> int:
    """SIGKILL every process of our uid that is orphaned (its parent is init or a subreaper
    above this process, never this process: our own children are live agents) and names
    ``mark``, a path unique to one turn; returns how many."""
    landing, me, uid = _ancestors(), os.getpid(), os.getuid()
    killed = 0
    for pid in all_pids():
        found = stat_of(pid)
        if pid == me or found is None or found[0] not in landing:
            continue
        with contextlib.suppress(OSError):
            if (PROC / str(pid)).stat().st_uid != uid or not _names(pid, mark):
                continue
            if stat_of(pid) == found:  # still that process (its pid not given to another)
                os.kill(pid, signal.SIGKILL)
                killed += 1
    if killed:
        log.info("stopped %s orphaned sandbox process(es) of the turn in %s", killed, mark)
    return killed


def _end(tmpdir: Path) -> int:
    killed = sweep(str(tmpdir))
    shutil.rmtree(tmpdir, ignore_errors=True)
    return killed


async def ended(tmpdir: Path) -> int:
    """After the turn: its orphans killed and its TMPDIR removed, off the event loop and waited
    for at most SWEEP_WAIT_S. Returns how many were killed (0 when it outlasted the wait)."""
    with contextlib.suppress(TimeoutError):
        return await asyncio.wait_for(asyncio.to_thread(_end, tmpdir), SWEEP_WAIT_S)
    log.warning("the sweep of %s outlasted %ss; left to finish alone", tmpdir, SWEEP_WAIT_S)
    return 0
