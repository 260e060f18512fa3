"""What Codex's sandbox leaves running after a turn, found and stopped (processes as /proc shows
them: ``executors.procs``).

Codex 0.171's sandbox helper (``codex-linux-sandbox``: bubblewrap with ``--new-session`` and
``--unshare-pid``, its environment cleared to PATH and TMPDIR) sometimes leaves its bubblewrap
child behind: pid 1 of its own pid namespace, never exec'd, waiting for ever, reparented to
init. Measured: in the burst of sandboxed file helpers (``--codex-run-as-fs-helper``) Codex
starts at ``thread/start``, mid-turn, seconds before a turn that ends normally (the app-server
exits on end-of-file, rc 0, no SIGTERM from us): not our stop path. It escapes the stop of the
agent's tree (its own session, no longer below the agent) and the tag sweep (Codex cleared the
tag from its environment).

What names it: its command line is Codex's sandbox (``CODEX_MARKS``) binding the turn's
directory. After a turn, every orphan of ours (its parent init or a subreaper above this
process) whose command line is Codex's sandbox and names the turn's directory is killed
(``ended``); a live sandbox has a live parent (Codex's helper) and is never one. An orphan of
another turn in the same directory is as stuck, and goes too. A process that died mid-turn
swept nothing: its next start kills such orphans naming any directory it may run tasks in
(``sweep_stale``).

Not per-turn TMPDIRs: Codex keeps the registry of the mount points its sandboxes made in
``$TMPDIR`` (``codex-bwrap-synthetic-mount-targets-<uid>``, refused when it is a link), and
removes one only when no sandbox registered there still uses it; turns at once in one directory
(a sub-task's beside its parent's) must share it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Iterable
from pathlib import Path

from executors.procs import PROC, all_pids, stat_of

log = logging.getLogger(__name__)

# what a leaked one runs (its arg0's name), and an argument only Codex's sandbox has: its
# helper (by name) or its file helper's flag (measured with 0.171: ``bwrap --as-pid-1 … --bind
# <cwd> <cwd> … -- …/codex-linux-sandbox … -- …/codex --codex-run-as-fs-helper``)
LEAKED_ARG0 = b"bwrap"
CODEX_MARKS = (b"codex-linux-sandbox", b"--codex-run-as-fs-helper")
SWEEP_WAIT_S = 5.0  # a /proc read stuck on a process in uninterruptible sleep: not the turn's


def _ancestors() -> set[int]:
    """This process's ancestors (not itself), init included: where an orphan of ours lands (init,
    or a subreaper above us)."""
    found: set[int] = set()
    pid = os.getppid()
    while pid > 0 and pid not in found:
        found.add(pid)
        parent = stat_of(pid)
        pid = parent[0] if parent else 0
    # as pid 1 (a container without an init) orphans land on the bot, which does not reap
    # them: run it with one (``docker run --init``); its own children are live agents
    return (found | {1}) - {os.getpid()}


def _codex_sandbox_naming(pid: int, marks: tuple[bytes, ...]) -> bool:
    """``pid``'s command line is Codex's sandbox (bubblewrap running Codex's helper: whole
    arguments, not words inside one) and names one of ``marks`` (as a whole path: followed by
    the end of an argument or a ``/``)."""
    try:
        args = (PROC / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    if args[0].rsplit(b"/", 1)[-1] != LEAKED_ARG0:
        return False
    if not any(arg.rsplit(b"/", 1)[-1] in CODEX_MARKS for arg in args[1:]):
        return False
    return any(arg == m or arg.startswith(m + b"/") for arg in args for m in marks)


def sweep(paths: Iterable[Path]) -> int:
    """SIGKILL every process of our uid that is orphaned (its parent is init or a subreaper
    above this process, never this process: our own children are live agents), is Codex's
    sandbox and names one of ``paths`` (or a path inside one); returns how many."""
    marks = tuple(str(p).encode() for p in paths)
    if not marks:
        return 0
    landing, me, uid = _ancestors(), os.getpid(), os.getuid()
    killed = 0
    for pid in all_pids():
        found = stat_of(pid)
        if pid == me or found is None or found[0] not in landing:
            continue
        with contextlib.suppress(OSError):
            if (PROC / str(pid)).stat().st_uid != uid or not _codex_sandbox_naming(pid, marks):
                continue
            if stat_of(pid) == found:  # still that process (its pid not given to another)
                os.kill(pid, signal.SIGKILL)
                killed += 1
    if killed:
        log.info("stopped %s orphaned Codex sandbox process(es) in %s", killed, marks)
    return killed


async def ended(cwd: Path) -> int:
    """After a turn in ``cwd``: the orphans of Codex's sandbox naming it killed, off the event
    loop and waited for at most SWEEP_WAIT_S. Returns how many (0 when it outlasted the wait)."""
    with contextlib.suppress(TimeoutError):
        return await asyncio.wait_for(asyncio.to_thread(sweep, [cwd]), SWEEP_WAIT_S)
    log.warning("the sweep of %s outlasted %ss; left to finish alone", cwd, SWEEP_WAIT_S)
    return 0


async def sweep_stale(roots: Iterable[Path]) -> int:
    """At a process's start: kill the orphans of Codex's sandbox naming a directory under
    ``roots`` (where its tasks run: the allowed working directories, the worktrees), which a
    crashed earlier run could not sweep; off the event loop, waited for at most SWEEP_WAIT_S."""
    with contextlib.suppress(TimeoutError):
        return await asyncio.wait_for(asyncio.to_thread(sweep, list(roots)), SWEEP_WAIT_S)
    log.warning("the start-up sweep outlasted %ss; left to finish alone", SWEEP_WAIT_S)
    return 0
