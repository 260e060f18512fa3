"""Subprocess plumbing shared by the engines: a clean environment, line reading, stopping a tree."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import signal
from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import psutil

log = logging.getLogger(__name__)

# Agents run with their telemetry and non-essential traffic off.
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
}
LINE_LIMIT = 64 * 1024 * 1024  # one stream-json line may carry a whole file


def agent_env(base: Mapping[str, str], secrets: Iterable[str]) -> dict[str, str]:
    """The bot's environment minus its own settings and anything holding a secret value."""
    hidden = [s for s in secrets if s]
    env = {k: v for k, v in base.items()
           if not k.startswith("DETACH_") and not any(s in v for s in hidden)}
    env.update(QUIET_ENV)
    return env


@functools.cache
def _death_signal_prefix() -> tuple[str, ...]:
    """util-linux ``setpriv`` gives the agent a parent-death signal: if the bot is killed -9, the
    agent gets SIGINT and stops its own tools instead of running on as an orphan."""
    setpriv = shutil.which("setpriv")
    return (setpriv, "--pdeathsig", "INT", "--") if setpriv else ()


async def spawn(argv: list[str], cwd: str, env: Mapping[str, str]) -> asyncio.subprocess.Process:
    """Start an agent in its own session with pipes on all three streams."""
    return await asyncio.create_subprocess_exec(
        *_death_signal_prefix(), *argv, cwd=cwd, env=dict(env), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        start_new_session=True, limit=LINE_LIMIT)


async def read_lines(stream: asyncio.StreamReader) -> AsyncIterator[str]:
    while line := await stream.readline():
        yield line.decode("utf-8", errors="replace")


class StderrTail:
    """Keeps the last lines a process wrote to stderr, for failure reports."""

    def __init__(self, max_lines: int = 20) -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)

    async def drain(self, stream: asyncio.StreamReader) -> None:
        async for line in read_lines(stream):
            self._lines.append(line.rstrip("\n"))

    def text(self, max_chars: int = 1500) -> str:
        return "\n".join(self._lines)[-max_chars:]


class JsonLines:
    """Writes one JSON object per line to an agent's stdin; writes from concurrent tasks are
    serialised, and a closed pipe (the agent exited) is not an error here."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._lock = asyncio.Lock()

    async def write(self, message: dict[str, Any]) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            return
        async with self._lock:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.write((json.dumps(message) + "\n").encode())
                await stdin.drain()

    def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()


def descendants(pid: int) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).children(recursive=True)
    return []


async def stop_tree(proc: asyncio.subprocess.Process, grace_s: float,
                    first: signal.Signals = signal.SIGINT) -> None:
    """``first`` (Claude: SIGINT, it stops its own tools and exits), then after ``grace_s``
    SIGKILL the agent and every process group below it: tool shells are session leaders."""
    if proc.returncode is not None:
        _kill_all(descendants(proc.pid))
        return
    tree = descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(first)
    try:
        await asyncio.wait_for(proc.wait(), grace_s)
    except TimeoutError:
        log.info("agent pid %s ignored SIGINT for %.1fs; killing its tree", proc.pid, grace_s)
    tree += descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    _kill_all(tree)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), grace_s)


def _kill_all(procs: list[psutil.Process]) -> None:
    for child in procs:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if child.is_running():
                os.killpg(os.getpgid(child.pid), signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            child.kill()
