"""Subprocess plumbing shared by the engines: a clean environment, the turn's process (spawn,
stderr tail, stop the whole tree), line reading."""

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
from dataclasses import dataclass
from typing import Any

import anyio
import psutil

from bot.errors import AgentCrashed, AgentNotInstalled
from bot.models import TurnSpec

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
# Every process of a turn carries this variable (``<owner>:<turn id>``): a daemon that left the
# agent's process group and session still has it, so it is found and stopped with the turn, and
# at the next start when the bot died.
TAG_ENV = "DETACH_AGENT_TAG"
_SWEEPS: set[asyncio.Future[int]] = set()  # tag sweeps under way (kept from being collected)
LINGER_S = 5.0  # how long a pipe may stay open after its agent exited (a child holding it)


def agent_env(base: Mapping[str, str], secrets: Iterable[str]) -> dict[str, str]:
    """The bot's environment minus its own settings and anything holding a secret value."""
    hidden = [s for s in secrets if s]
    env = {
        k: v
        for k, v in base.items()
        if not k.startswith("DETACH_") and not any(s in v for s in hidden)
    }
    env.update(QUIET_ENV)
    return env


@functools.cache
def _death_signal_prefix() -> tuple[str, ...]:
    """util-linux ``setpriv`` gives the agent a parent-death signal: if the bot is killed -9, the
    agent gets SIGINT and stops its own tools instead of running on as an orphan."""
    setpriv = shutil.which("setpriv")
    return (setpriv, "--pdeathsig", "INT", "--") if setpriv else ()


async def spawn(
    argv: list[str], cwd: str, env: Mapping[str, str], tag: str | None = None
) -> asyncio.subprocess.Process:
    """Start an agent in its own session with pipes on all three streams, tagged with ``tag``
    (see TAG_ENV)."""
    env = {**env, TAG_ENV: tag} if tag else dict(env)
    return await asyncio.create_subprocess_exec(
        *_death_signal_prefix(),
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        limit=LINE_LIMIT,
    )


@dataclass(frozen=True, slots=True)
class AgentProcess:
    """A running agent: its process and the tail of what it wrote to stderr."""

    proc: asyncio.subprocess.Process
    stderr: StderrTail
    drain: asyncio.Task[None]

    async def crashed(self, reason: str, grace_s: float) -> AgentCrashed:
        """The error for an agent that ended without a verdict (after it exited, bounded)."""
        await wait_exit(self.proc, grace_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.drain), grace_s)
        return AgentCrashed(reason, self.proc.returncode, self.stderr.text())


@contextlib.asynccontextmanager
async def agent_process(
    engine: str,
    binary: str | None,
    argv: list[str],
    spec: TurnSpec,
    env: Mapping[str, str],
    grace_s: float,
    first: signal.Signals = signal.SIGINT,
) -> AsyncIterator[AgentProcess]:
    """The skeleton every engine's turn runs in: spawn (a missing binary is
    ``AgentNotInstalled``), keep the stderr tail, and whatever ends the turn (its end, an error,
    a cancel) stop the agent's whole tree, shielded from further cancels."""
    try:
        proc = await spawn(argv, str(spec.cwd), env, spec.process_tag)
    except OSError as exc:
        raise AgentNotInstalled(engine, binary) from exc
    log.info("task %s turn %s: %s pid %s started", spec.task_id, spec.turn_id, engine, proc.pid)
    stderr = StderrTail()
    drain = asyncio.create_task(stderr.drain(proc.stderr))  # type: ignore[arg-type]
    try:
        yield AgentProcess(proc, stderr, drain)
    finally:
        with anyio.CancelScope(shield=True):
            await stop_tree(proc, grace_s, first, spec.process_tag)
            drain.cancel()
        log.info(
            "task %s turn %s: %s pid %s ended rc=%s",
            spec.task_id,
            spec.turn_id,
            engine,
            proc.pid,
            proc.returncode,
        )


async def read_lines(
    stream: asyncio.StreamReader, proc: asyncio.subprocess.Process | None = None
) -> AsyncIterator[str]:
    """The stream's lines until EOF; once ``proc`` exited, until EOF or LINGER_S without a line
    (a child it left may hold the pipe open for ever). A line over LINE_LIMIT ends the turn with
    a clear reason instead of an internal error."""
    while line := await _readline(stream, proc):
        yield line.decode("utf-8", errors="replace")


async def _readline(stream: asyncio.StreamReader, proc: asyncio.subprocess.Process | None) -> bytes:
    read = asyncio.ensure_future(stream.readline())
    try:
        if proc is not None and proc.returncode is None:
            exited = asyncio.ensure_future(_exited(proc))
            try:
                await asyncio.wait({read, exited}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                exited.cancel()
        if proc is not None and not read.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(read), LINGER_S)
            if not read.done():
                log.info(
                    "agent pid %s exited; its output pipe is held open: stop reading", proc.pid
                )
                return b""
        return await read
    except ValueError as exc:  # asyncio's LimitOverrunError, re-raised by readline()
        raise AgentCrashed(
            f"the agent printed a line longer than {LINE_LIMIT // 2**20} MiB", None, ""
        ) from exc
    finally:
        read.cancel()


class StderrTail:
    """Keeps the last lines a process wrote to stderr, for failure reports."""

    def __init__(self, max_lines: int = 20) -> None:
        self._lines: deque[str] = deque(maxlen=max_lines)

    async def drain(self, stream: asyncio.StreamReader) -> None:
        with contextlib.suppress(AgentCrashed):  # a line too long for the tail ends it
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


async def _exited(proc: asyncio.subprocess.Process, every_s: float = 0.1) -> None:
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
        await asyncio.wait_for(_exited(proc), timeout_s)
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


def _kill_all(procs: list[psutil.Process]) -> None:
    for child in procs:
        with contextlib.suppress(psutil.Error, ProcessLookupError, PermissionError):
            if child.is_running():
                os.killpg(os.getpgid(child.pid), signal.SIGKILL)
        with contextlib.suppress(psutil.Error):
            child.kill()


def kill_tagged(tag: str, *, exact: bool = False) -> int:
    """SIGKILL every process of ours whose environment carries TAG_ENV equal to ``tag`` (or,
    without ``exact``, starting with it); returns how many. At start, the bot passes its owner
    prefix to stop what a crashed run left behind."""
    me = os.getpid()
    killed = 0
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == me:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            value = proc.environ().get(TAG_ENV)
            if value is not None and (value == tag if exact else value.startswith(tag)):
                proc.kill()
                killed += 1
    if killed:
        log.info("stopped %s left-behind agent process(es) tagged %s", killed, tag)
    return killed
