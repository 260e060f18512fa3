"""Warm agents (DETACH_WARM_AGENTS): one agent process started before its task, so a new task's
first answer comes sooner (measured: docs/performance.md).

Contract. A warm process is a pure function of its ``WarmKey``: the engine, the binary (path,
size, mtime), the resolved directory, the mode, the exact argv (inline settings included), the
child's environment (without the tag, which names no task), the content of the files the CLI
reads at start (its login, user settings and memory; the project's when those load), the deny
list, the repository's state (``git status --porcelain=v2 --branch``: the CLI snapshots it at
start) and the day (its prompt names the date). The key is computed from what the cold path
built for the task; the warm process is used only if it is equal, else it is stopped and the
task runs cold. It is started with no task's data: no prompt, task id, session or MCP server
(the prompt goes on stdin after take-over). Never warm: a resume, a task with MCP servers
(sub-tasks: their config names the parent task), anything whose key differs (another
directory, mode, settings, deny list, login). One at a time; stopped with its whole tree on a
key change, after ``ttl_s`` idle, at ``aclose`` (shutdown), and never used twice."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.models import TurnSpec
from executors import warm_saved
from executors.process import AgentProcess, let_go, start_agent
from executors.shield import shielded
from executors.tree import stop_tree
from executors.warm_key import WarmKey

log = logging.getLogger(__name__)

STOP_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class WarmStart:
    """What a warm process is started with: its key, command line, environment and tag."""

    key: WarmKey
    argv: tuple[str, ...]
    env: Mapping[str, str]
    tag: str | None
    own_tmp: bool = False  # started with a TMPDIR of its own (executors.process.start_agent)


@dataclass(frozen=True, slots=True)
class WarmCounts:
    """What the pool did: processes started, taken by a task, stopped unused."""

    started: int
    taken: int
    discarded: int


@dataclass(slots=True)
class _Held:
    start: WarmStart
    agent: AgentProcess
    expiry: asyncio.Task[None] | None = None


class WarmPool:
    """At most one warm agent process. ``take`` hands it over only for an equal key (and stops
    it otherwise); ``replenish`` starts the next in the background; ``aclose`` stops all."""

    def __init__(
        self, ttl_s: float = 600.0, grace_s: float = STOP_GRACE_S, saved: Path | None = None
    ) -> None:
        """``saved``: where each engine's last start is kept (in the bot's private directory),
        warmed again at the next start-up; None: not kept."""
        self._saved = saved
        self._ttl_s = ttl_s
        self._grace_s = grace_s
        self._held: _Held | None = None
        self._jobs: set[asyncio.Task[None]] = set()
        self._closed = False
        self._runs = itertools.count(1)
        self._started = self._taken = self._discarded = 0

    @property
    def counts(self) -> WarmCounts:
        return WarmCounts(self._started, self._taken, self._discarded)

    @property
    def holding(self) -> bool:
        """Whether a warm process is ready (else a task need not compute its key)."""
        return self._held is not None

    @property
    def held_pid(self) -> int | None:
        """The idle warm process's pid (None: none is ready)."""
        return self._held.agent.proc.pid if self._held is not None else None

    def take(self, key: WarmKey) -> AgentProcess | None:
        """The warm process if its key equals ``key`` (it is this caller's now); else None, and
        the one held (if any) is stopped."""
        held, self._held = self._held, None
        if held is None:
            return None
        if held.expiry is not None:
            held.expiry.cancel()
        if held.start.key == key and held.agent.proc.returncode is None:
            self._taken += 1
            log.info("warm %s pid %s taken", key.engine, held.agent.proc.pid)
            return held.agent
        self._discard(held, "its key differs" if held.start.key != key else "it exited")
        return None

    def remember(self, engine: str, template: TurnSpec) -> None:
        """Keep ``template`` (``warm_template``) as ``engine``'s start for the next start-up."""
        if self._saved is not None:
            self._job(asyncio.to_thread(warm_saved.save, self._saved, engine, template))

    async def recall(self, engine: str) -> TurnSpec | None:
        """``engine``'s start kept by an earlier run (None: none, or unreadable)."""
        if self._saved is None:
            return None
        return await asyncio.to_thread(warm_saved.load, self._saved, engine)

    def replenish(self, prepare: Callable[[], Awaitable[WarmStart | None]]) -> None:
        """Start the next warm process in the background from what ``prepare`` builds (None:
        nothing to warm); the one held is stopped if its key differs."""
        if not self._closed:
            self._job(self._replenish(prepare))

    async def _replenish(self, prepare: Callable[[], Awaitable[WarmStart | None]]) -> None:
        start = await prepare()
        if start is None or self._closed:
            return
        held = self._held
        if held is not None and held.start.key == start.key:
            return  # the same start is ready already
        if held is not None:
            self._held = None
            self._discard(held, "a new key")
        tag = f"{start.tag}.{next(self._runs)}" if start.tag else None  # its own: what stops it
        agent = await start_agent(
            start.key.engine,
            list(start.argv),
            start.key.cwd,
            start.env,
            tag,
            start.key.nice,
            own_tmp=start.own_tmp,
        )
        if self._closed or self._held is not None:  # closed, or another start won meanwhile
            await shielded(self._stop(agent))
            return
        self._started += 1
        self._held = _Held(start, agent)
        self._held.expiry = asyncio.create_task(self._expire(self._held))
        log.info("warm %s pid %s started in %s", start.key.engine, agent.proc.pid, start.key.cwd)

    async def _expire(self, held: _Held) -> None:
        await asyncio.sleep(self._ttl_s)
        if self._held is held:
            self._held = None
            self._discard(held, f"idle for {self._ttl_s:g}s")

    def _discard(self, held: _Held, why: str) -> None:
        self._discarded += 1
        log.info("warm %s pid %s stopped: %s", held.start.key.engine, held.agent.proc.pid, why)
        self._job(self._stop(held.agent))

    async def _stop(self, agent: AgentProcess) -> None:
        await stop_tree(agent.proc, self._grace_s, tag=agent.tag)
        agent.drain.cancel()
        await let_go(agent)

    def _job(self, work: Awaitable[None]) -> None:
        job = asyncio.ensure_future(work)
        self._jobs.add(job)
        job.add_done_callback(self._done)

    def _done(self, job: asyncio.Task[None]) -> None:
        self._jobs.discard(job)
        if not job.cancelled() and job.exception() is not None:
            log.warning("warm agent: %s", job.exception())

    async def settled(self, timeout_s: float) -> None:
        """Until the starts and stops under way now are done (at most ``timeout_s``)."""
        pending = [j for j in self._jobs if not j.done()]
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)

    async def aclose(self) -> None:
        """Stop the warm process (whole tree) and what was being started; bounded."""
        self._closed = True
        held, self._held = self._held, None
        if held is not None:
            if held.expiry is not None:
                held.expiry.cancel()
            self._discard(held, "shutdown")
        pending = [j for j in self._jobs if not j.done()]
        if pending:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.gather(*pending, return_exceptions=True), 4 * self._grace_s
                )
