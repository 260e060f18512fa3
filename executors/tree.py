"""Stopping an agent's whole process tree: the agent, every process group below it, and every
process carrying the turn's tag, also after the bot died (processes as /proc shows them:
``executors.procs``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal

from executors.pidns import agent_of
from executors.procs import TAG_ENV, Proc, all_pids, kill_tagged, stat_of

__all__ = [
    "TAG_ENV",
    "Proc",
    "descendants",
    "ended_waiting",
    "kill_tagged",
    "stop_tree",
    "wait_exit",
]
log = logging.getLogger(__name__)
_SWEEPS: set[asyncio.Future[int]] = set()  # tag sweeps under way (kept from being collected)


def descendants(pid: int) -> list[Proc]:
    """Every process below ``pid`` (children, theirs, …), as they are now."""
    children: dict[int, list[Proc]] = {}
    for other in all_pids():
        found = stat_of(other)
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


async def ended_waiting(proc: asyncio.subprocess.Process, timeout_s: float) -> None:
    """A process waiting on its stdin before it runs anything (a jail or a chain started
    ahead) ends: its stdin closed (it exits, having run nothing), killed if it does not
    within ``timeout_s``; reaped either way."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        async with asyncio.timeout(timeout_s):
            await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


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
        # reaped: what it left was given to init (or a subreaper) as it exited, so nothing is
        # below its pid now (a /proc scan on the loop at every turn's end, finding at most what
        # a reused pid has); the turn's tag sweep and the orphan sweep find what it left
        return
    # each a /proc scan (~10 ms with a few hundred processes): off the loop, which runs others
    tree = {p.pid: p for p in await asyncio.to_thread(descendants, proc.pid)}
    _signal_agent(proc, first, await asyncio.to_thread(agent_of, proc.pid))
    deadline = asyncio.get_running_loop().time() + grace_s
    while proc.returncode is None and asyncio.get_running_loop().time() < deadline:
        # what it starts while stopping (or had just started) is part of the tree too
        tree.update((p.pid, p) for p in await asyncio.to_thread(descendants, proc.pid))
        await asyncio.sleep(0.05)
    if proc.returncode is None:
        log.info(
            "agent pid %s ignored %s for %.1fs; killing its tree", proc.pid, first.name, grace_s
        )
    tree.update((p.pid, p) for p in await asyncio.to_thread(descendants, proc.pid))
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    _kill_all(list(tree.values()))
    await wait_exit(proc, grace_s)


def _signal_agent(
    proc: asyncio.subprocess.Process, sig: signal.Signals, inside: Proc | None
) -> None:
    """``sig`` to the agent: the process itself, or ``inside``, the agent its PID namespace
    runs (``executors.pidns``: bubblewrap would die of it, and the agent with it, unwarned)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if inside is not None and inside.alive():
            os.kill(inside.pid, sig)
        else:
            proc.send_signal(sig)


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
