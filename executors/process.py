"""Subprocess plumbing shared by the engines: a clean environment, the turn's process (spawn,
stderr tail, stop the whole tree), line reading."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import signal
import tempfile
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bot.errors import AgentCrashed, AgentNotInstalled, Bound, StreamBounded
from bot.models import Phrase, TurnSpec
from executors import pidns
from executors.procs import RUN_ENV, this_run
from executors.shield import shielded
from executors.tree import TAG_ENV, exited, stop_tree, wait_exit

log = logging.getLogger(__name__)


class Ahead(Protocol):
    """An agent's process chain started ahead (``executors.ahead.SpawnAhead``): ``run`` gives it
    an agent (None: spawn cold); ``given`` is the last chain it gave one."""

    given: asyncio.subprocess.Process | None

    async def run(
        self, argv: Sequence[str], cwd: str, env: Mapping[str, str], nice: int
    ) -> asyncio.subprocess.Process | None: ...


# Agents run with their telemetry and non-essential traffic off.
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
}
# One stream-json line may carry a whole file: Claude Code's Read takes a PDF of up to 20 MiB,
# 27 MiB as base64. A line is parsed on the loop (json.loads holds the GIL, even in a thread):
# 32 MiB stalls it ~0.2 s once; the reader keeps at most twice this before it pauses the pipe.
LINE_LIMIT = 32 * 1024 * 1024
LINGER_S = 5.0  # how long a pipe may stay open after its agent exited (a child holding it)
CREATE_WAIT_S = 5.0  # a cancelled spawn: how long its process may take to be created, to stop


def version_line(engine: str, version: str, pinned: str) -> Phrase:
    """``claude 2.1.197``, with a note when this is not the version the engine was measured
    with."""
    params = {"engine": engine, "version": version, "pinned": pinned}
    return Phrase("probe.version" if version == pinned else "probe.version_untested", params)


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
def chain(nice: int, contained: bool = False) -> tuple[str, ...]:
    """``nice``: a lower CPU priority for the agent and all it starts (the bot is not kept
    waiting); ``setpriv``: SIGKILL when the bot dies, even for an agent ignoring SIGINT; and,
    unless ``contained`` (it makes its own), a PID namespace that dies with the bot, and all
    it started with it (``executors.pidns``; else the watchdog's sweep). The bot's own stops
    are unchanged: SIGINT first (``stop_tree``), SIGKILL after the grace."""
    niced = shutil.which("nice") if nice else None
    setpriv = shutil.which("setpriv")
    return (
        *((niced, "-n", str(nice)) if niced else ()),
        *((setpriv, "--pdeathsig", "KILL", "--") if setpriv else ()),
        *(() if contained else pidns.prefix()),
    )


async def spawn(
    argv: list[str],
    cwd: str,
    env: Mapping[str, str],
    tag: str | None = None,
    nice: int = 0,
    contained: bool = False,
    ahead: Ahead | None = None,
) -> asyncio.subprocess.Process:
    """Start an agent in its own session with pipes on all three streams, tagged with ``tag``
    (see TAG_ENV) and with this process's run (RUN_ENV: what its watchdog stops when it dies),
    ``nice`` steps below the bot's CPU priority, in a PID namespace that dies with the bot
    unless ``contained`` (``argv`` makes its own: Detach's sandbox); safe to cancel.
    ``ahead``: its chain, when one started ahead is the same (``executors.ahead``)."""
    env = {**env, TAG_ENV: tag, RUN_ENV: this_run()} if tag else dict(env)
    if ahead is not None and not contained and (proc := await ahead.run(argv, cwd, env, nice)):
        return proc
    return await created(
        asyncio.create_subprocess_exec(
            *chain(nice, contained),
            *argv,
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=LINE_LIMIT,
        ),
        tag,
    )


async def created(
    creating: Coroutine[Any, Any, asyncio.subprocess.Process], tag: str | None = None
) -> asyncio.subprocess.Process:
    """The process ``asyncio.create_subprocess_exec(...)`` makes, safe to cancel: a cancel that
    lands while it is being created (forked, its pipes not yet connected) lets the creation
    finish (bounded), stops the new process's whole tree (and what carries ``tag``), and is
    raised then. asyncio's own handling of that cancel (CPython 3.11) kills only the leader and
    then waits until every pipe closes, which a child it already started (a shell's command, a
    tool) holds open for as long as that child runs: a /cancel landing there left the turn
    running, and the child, for as long as the child lived."""
    task = asyncio.ensure_future(creating)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await shielded(_abandon(task, tag))
        raise


async def _abandon(creating: asyncio.Future[asyncio.subprocess.Process], tag: str | None) -> None:
    """The process of a cancelled spawn, once created (bounded): stopped with its whole tree."""
    await asyncio.wait({creating}, timeout=CREATE_WAIT_S)
    if not creating.done():
        log.error("a cancelled spawn was not created within %ss; left to asyncio", CREATE_WAIT_S)
        return
    if creating.cancelled() or creating.exception() is not None:
        return  # it never ran
    proc = creating.result()
    log.info("agent pid %s: its spawn was cancelled; stopping it", proc.pid)
    await stop_tree(proc, CREATE_WAIT_S, signal.SIGKILL, tag)  # waits for its exit (bounded)


@dataclass(frozen=True, slots=True)
class AgentProcess:
    """A running agent: its process and the tail of what it wrote to stderr."""

    proc: asyncio.subprocess.Process
    stderr: StderrTail
    drain: asyncio.Task[None]
    tag: str | None = None  # the tag its processes carry (what stops them)
    tmp: str | None = None  # its own TMPDIR (``start_agent``'s ``own_tmp``), removed after it

    async def crashed(
        self, reason: str, grace_s: float, said: Phrase | None = None
    ) -> AgentCrashed:
        """The error for an agent that ended without a verdict (after it exited, bounded)."""
        await wait_exit(self.proc, grace_s)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self.drain), grace_s)
        return AgentCrashed(reason, self.proc.returncode, self.stderr.text(), said)

    @property
    def pid(self) -> int:
        return self.proc.pid


async def start_agent(
    engine: str,
    argv: list[str],
    cwd: str,
    env: Mapping[str, str],
    tag: str | None,
    nice: int = 0,
    binary: str | None = None,
    own_tmp: bool = False,
    ahead: Ahead | None = None,
) -> AgentProcess:
    """Spawn an agent (a missing binary is ``AgentNotInstalled``) and keep its stderr tail;
    ``own_tmp``: with a TMPDIR of its own (0700; ``let_go`` removes it). Claude Code's sandbox
    runtime names its proxy sockets by pid in the temporary directory, and every agent is pid 2
    in its PID namespace: in a shared /tmp a second sandboxed turn took the first's socket, and
    its commands' traffic went through the other turn's proxy, with that turn's allowed hosts."""
    tmp = await asyncio.to_thread(_made_tmp, env) if own_tmp else None
    try:
        proc = await spawn(
            argv, cwd, {**env, "TMPDIR": tmp} if tmp else env, tag, nice, ahead=ahead
        )
    except OSError as exc:
        await _removed(tmp)
        raise AgentNotInstalled(engine, binary or argv[0]) from exc
    except BaseException:
        await _removed(tmp)
        raise
    stderr = StderrTail()
    drain = asyncio.create_task(stderr.drain(proc.stderr))  # type: ignore[arg-type]
    return AgentProcess(proc, stderr, drain, tag, tmp)


async def let_go(agent: AgentProcess) -> None:
    """After an agent stopped: its own TMPDIR removed (in a thread: an unsandboxed turn's
    commands inherit it and may have filled it)."""
    await shielded(_removed(agent.tmp))


def _made_tmp(env: Mapping[str, str]) -> str:
    base = env.get("TMPDIR") or tempfile.gettempdir()
    return tempfile.mkdtemp(prefix="detach-agent-", dir=base if os.path.isdir(base) else None)


async def _removed(path: str | None) -> None:
    if path is not None:
        await asyncio.to_thread(shutil.rmtree, path, True)


@contextlib.asynccontextmanager
async def agent_process(
    engine: str,
    binary: str | None,
    argv: list[str],
    spec: TurnSpec,
    env: Mapping[str, str],
    grace_s: float,
    first: signal.Signals = signal.SIGINT,
    warm: AgentProcess | None = None,
    own_tmp: bool = False,
    ahead: Ahead | None = None,
) -> AsyncIterator[AgentProcess]:
    """The skeleton every engine's turn runs in: spawn (or take ``warm``, started for this
    very argv and environment: ``executors.warm``; else its chain started ``ahead``, when one
    is the same), keep the stderr tail, and whatever ends the
    turn (its end, an error, a cancel) stop the agent's whole tree, shielded from further
    cancels."""
    # the moment the bot hands the agent to the OS (the "started" line below comes after the
    # pipes are connected, while the loop runs others' work: a few ms later, the agent running)
    log.debug("task %s turn %s: %s spawning", spec.task_id, spec.turn_id, engine)
    agent = warm or await start_agent(
        engine, argv, str(spec.cwd), env, spec.process_tag, spec.nice, binary, own_tmp, ahead
    )
    how = "warm, taken" if warm else "started"
    if ahead is not None and ahead.given is agent.proc:
        how = "started ahead"
    log.info("task %s turn %s: %s pid %s %s", spec.task_id, spec.turn_id, engine, agent.pid, how)
    try:
        yield agent
    finally:
        await shielded(stop_tree(agent.proc, grace_s, first, agent.tag))
        agent.drain.cancel()
        await let_go(agent)
        log.info(
            "task %s turn %s: %s pid %s ended rc=%s",
            spec.task_id,
            spec.turn_id,
            engine,
            agent.pid,
            agent.proc.returncode,
        )


async def read_lines(
    stream: asyncio.StreamReader, proc: asyncio.subprocess.Process | None = None
) -> AsyncIterator[str]:
    """The stream's lines until EOF; once ``proc`` exited, until EOF or LINGER_S without a line
    (a child it left may hold the pipe open for ever). A line over LINE_LIMIT ends the turn with
    a clear reason (``StreamBounded``) instead of an internal error. Every line is awaited as a
    task of its own, so a flood of short lines hands the loop back between any two of them;
    asyncio's reader looks for a line's end only in what arrived since it last looked (linear)."""
    gone = asyncio.ensure_future(exited(proc)) if proc is not None else None
    try:
        while line := await _readline(stream, proc, gone):
            yield line.decode("utf-8", errors="replace")
    finally:
        if gone is not None:
            gone.cancel()


async def _readline(
    stream: asyncio.StreamReader,
    proc: asyncio.subprocess.Process | None,
    gone: asyncio.Future[None] | None,
) -> bytes:
    """One line; ``gone``: done once ``proc`` exited (one watcher for all the lines)."""
    read = asyncio.ensure_future(stream.readline())
    try:
        if gone is not None and not gone.done():
            either: set[asyncio.Future[Any]] = {read, gone}
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
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
        said = Phrase("agent.bounded.line", {"limit": f"{LINE_LIMIT / 2**20:g}"})
        raise StreamBounded(Bound.LINE_BYTES, LINE_LIMIT, "a line", "the agent", said) from exc
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
