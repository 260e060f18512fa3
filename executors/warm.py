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
import hashlib
import itertools
import json
import logging
import os
import time
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bot.models import ApprovalMode, TurnSpec
from executors.gitscope import marked_top
from executors.process import AgentProcess, start_agent
from executors.shield import shielded
from executors.tree import stop_tree

log = logging.getLogger(__name__)

STOP_GRACE_S = 5.0
GIT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class WarmKey:
    """Everything a cold start of the task would be made of (see the module's contract)."""

    engine: str
    binary: str
    cwd: str
    mode: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    files: tuple[tuple[str, str], ...]
    deny: tuple[str, ...]
    repo: str
    day: str
    nice: int


@dataclass(frozen=True, slots=True)
class WarmStart:
    """What a warm process is started with: its key, command line, environment and tag."""

    key: WarmKey
    argv: tuple[str, ...]
    env: Mapping[str, str]
    tag: str | None


@dataclass(frozen=True, slots=True)
class WarmCounts:
    """What the pool did: processes started, taken by a task, stopped unused."""

    started: int
    taken: int
    discarded: int


async def warm_key(
    *,
    engine: str,
    mode: str,
    argv: Iterable[str],
    cwd: Path,
    env: Mapping[str, str],
    files: Iterable[Path],
    deny: Iterable[Path],
    nice: int,
) -> WarmKey:
    """The key of a start with these parts (a few file reads and one confined git)."""
    argv, deny = tuple(argv), tuple(deny)
    where = await asyncio.to_thread(Path(cwd).resolve)
    contents = await asyncio.to_thread(_fingerprints, (Path(argv[0]), *files))
    return WarmKey(
        engine=engine,
        binary=contents[0][1],
        cwd=str(where),
        mode=mode,
        argv=argv,
        env=tuple(sorted(env.items())),
        files=contents[1:],
        deny=tuple(str(p) for p in deny),
        repo=await _repo_state(where, env),
        day=time.strftime("%Y-%m-%d"),
        nice=nice,
    )


def _fingerprints(paths: Iterable[Path]) -> tuple[tuple[str, str], ...]:
    """Each path with the sha256 of its content ("" when absent); the first (the binary,
    large) by its resolved path, size and mtime."""
    found: list[tuple[str, str]] = []
    for n, path in enumerate(paths):
        try:
            if n == 0:
                stat = path.resolve().stat()
                found.append((str(path), f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"))
            else:
                found.append((str(path), hashlib.sha256(path.read_bytes()).hexdigest()))
        except OSError:
            found.append((str(path), ""))
    return tuple(found)


async def _repo_state(cwd: Path, env: Mapping[str, str]) -> str:
    """The repository's branch, head and changed files as git says them: run as the CLI runs
    its own ``git status`` at start (unconfined, with the child's environment, which carries
    ``gitguard.cli_env``'s overrides); no git outside a repository."""
    if await asyncio.to_thread(marked_top, cwd) is None:
        return "no repository"
    args = ("git", "--no-optional-locks", "-C", str(cwd), "status", "--porcelain=v2", "--branch")
    proc = await asyncio.create_subprocess_exec(
        *args, stdin=DEVNULL, stdout=PIPE, stderr=DEVNULL, env=dict(env)
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), GIT_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return "git status timed out"  # never equal to a state git said
    return f"{proc.returncode}\n{out.decode(errors='replace')}"


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
            self._job(asyncio.to_thread(_save, self._saved, engine, template))

    async def recall(self, engine: str) -> TurnSpec | None:
        """``engine``'s start kept by an earlier run (None: none, or unreadable)."""
        if self._saved is None:
            return None
        return await asyncio.to_thread(_load, self._saved, engine)

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
            start.key.engine, list(start.argv), start.key.cwd, start.env, tag, start.key.nice
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

    def _job(self, work: Awaitable[None]) -> None:
        job = asyncio.ensure_future(work)
        self._jobs.add(job)
        job.add_done_callback(self._done)

    def _done(self, job: asyncio.Task[None]) -> None:
        self._jobs.discard(job)
        if not job.cancelled() and job.exception() is not None:
            log.warning("warm agent: %s", job.exception())

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


def claude_files(env: Mapping[str, str], cwd: Path, project: bool) -> tuple[Path, ...]:
    """What Claude Code reads at start besides its argv: the login, user settings and memory
    of its config directory, and the project's own when project settings load."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    config = Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    own = tuple(config / name for name in (".credentials.json", "settings.json", "CLAUDE.md"))
    if not project:
        return own
    names = (".claude/settings.json", ".claude/settings.local.json", "CLAUDE.md", "CLAUDE.local.md")
    return own + tuple(cwd / name for name in names)


def warm_template(spec: TurnSpec) -> TurnSpec:
    """``spec`` without its task: no id, turn, prompt; the tag a warm process carries."""
    tag = f"{spec.process_tag.rpartition(':')[0]}:warm" if spec.process_tag else None
    return replace(spec, task_id=0, turn_id=0, prompt="", process_tag=tag)


_KEPT = (  # what a claude start is made of (never a task's: ``warm_template`` removed those)
    "cwd",
    "model",
    "append_system_prompt",
    "allowed_tools",
    "approval_mode",
    "extra_args",
    "max_budget_usd",
    "process_tag",
    "sandbox_domains",
    "private_dir",
    "nice",
    "deny_read",
    "secret_names",
)


def _save(path: Path, engine: str, template: TurnSpec) -> None:
    kept = {name: getattr(template, name) for name in _KEPT}
    data = _read(path)
    data[engine] = json.loads(json.dumps(kept, default=str))
    fd = os.open(f"{path}.new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out)
    os.replace(f"{path}.new", path)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _load(path: Path, engine: str) -> TurnSpec | None:
    kept = _read(path).get(engine)
    if not isinstance(kept, dict) or set(kept) != set(_KEPT):
        return None
    try:
        return TurnSpec(
            task_id=0,
            turn_id=0,
            prompt="",
            cwd=Path(kept["cwd"]),
            model=kept["model"],
            append_system_prompt=kept["append_system_prompt"],
            allowed_tools=tuple(kept["allowed_tools"]),
            approval_mode=ApprovalMode(kept["approval_mode"]),
            extra_args=tuple(kept["extra_args"]),
            max_budget_usd=kept["max_budget_usd"],
            process_tag=kept["process_tag"],
            sandbox_domains=tuple(kept["sandbox_domains"]),
            private_dir=Path(kept["private_dir"]) if kept["private_dir"] else None,
            nice=int(kept["nice"]),
            deny_read=tuple(Path(p) for p in kept["deny_read"]),
            secret_names=tuple(kept["secret_names"]),
        )
    except (TypeError, ValueError):
        return None
