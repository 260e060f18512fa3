"""The engines this process runs: each registered engine's configuration from Settings and the
environment, its executor, and the start-up probes (run concurrently, in the background) that
decide which are available and what /status says."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from bot.errors import AgentNotInstalled
from bot.models import Phrase, Preset
from bot.ports import EngineConfig, EngineSpec, Executor, McpAhead, SessionStore
from bot.settings import Settings
from bot.store import EnginePresence, UsageWindow
from bot.store.db import utcnow
from executors import pidns, registry
from executors.gitguard import GitGuard

log = logging.getLogger(__name__)


def engine_config(
    settings: Settings,
    spec: EngineSpec,
    environ: Mapping[str, str],
    sessions: SessionStore | None = None,
    presets: Iterable[Preset] = (),
    warm: object | None = None,
    mcp_ahead: McpAhead | None = None,
    spawn_ahead: object | None = None,
) -> EngineConfig:
    """An engine's configuration: its ``DETACH_<NAME>_*`` settings (its settings class, a base
    of Settings: ``bot.ports.EngineSettings``), and its own of ``presets``."""
    own = spec.settings.model_validate(settings.model_dump(include=set(spec.settings.model_fields)))
    found = shutil.which(spec.default_binary) if spec.default_binary else None  # none: no CLI
    binary = getattr(own, f"{spec.name}_bin", None) or found
    return EngineConfig(
        binary=str(binary) if binary else None,
        environ=environ,
        secrets=settings.secret_values(),
        cancel_grace_s=settings.cancel_grace_s,
        settings=own,
        sessions=sessions,
        presets=tuple(p for p in presets if p.engine == spec.name),
        warm=warm,
        mcp_ahead=mcp_ahead,
        spawn_ahead=spawn_ahead,
    )


PROBE_WAIT_S = 60.0  # the longest anything waits for the probes (each CLI's is bounded)


class Engines:
    """The engines of this process: every candidate is built at once and probed concurrently
    in the background, so a bot polls Telegram before its CLIs have answered. ``available``
    and ``status`` are filled in place when the probes are done; whatever needs them (a
    task's engine, /status, a turn) waits for ``settled`` first, which is at once after."""

    def __init__(
        self, candidates: Mapping[str, Executor], logged: Callable[[Phrase], str] = repr
    ) -> None:
        """``logged``: a status line as the log says it (in English)."""
        self._candidates = dict(candidates)
        self._logged = logged
        self.available: dict[str, Executor] = {}  # those that passed their probe
        self.status: list[Phrase] = []  # one line per engine, as /status says them
        self.lines: dict[str, Phrase] = {}  # each candidate's own probe line (/hosts)
        self._windows: dict[tuple[str, str], UsageWindow] = {}  # as reported here, latest
        self._done = asyncio.Event()

    async def probe(self) -> None:
        """Run every probe concurrently; fill ``available`` and ``status``."""
        try:
            contained = asyncio.ensure_future(asyncio.to_thread(pidns.problem))
            jailed = asyncio.ensure_future(GitGuard().confined())
            probes = await asyncio.gather(
                *(_probe(name, executor) for name, executor in self._candidates.items())
            )
            for (name, executor), (ok, line) in zip(self._candidates.items(), probes, strict=True):
                if ok:
                    self.available[name] = executor
                log.info("%s", self._logged(line))
                self.lines[name] = line
                self.status.append(line)
            self.status.append(containment_line(await contained))
            self.status.append(git_line(await jailed))
        finally:
            self._done.set()

    def window_reported(
        self, engine: str, window: str, used: float | None, resets_at: datetime | None
    ) -> None:
        """An engine's turn here reported one of its plan's windows."""
        self._windows[(engine, window)] = UsageWindow(engine, window, used, resets_at, utcnow())

    def windows(self) -> tuple[UsageWindow, ...]:
        """The windows this host's engines reported whose reset has not come (its heartbeat
        announces them: the plan each host has left)."""
        now = utcnow()
        return tuple(
            w for _, w in sorted(self._windows.items()) if w.resets_at is None or w.resets_at > now
        )

    def presence(self) -> tuple[EnginePresence, ...]:
        """Each candidate as a host announces it (nothing until the probes answered)."""
        return tuple(
            EnginePresence(
                name,
                name in self.available,
                self.lines.get(name, ""),
                name in self.available and executor.sandbox_problem() is None,
            )
            for name, executor in self._candidates.items()
            if name in self.lines
        )

    @property
    def settled(self) -> bool:
        return self._done.is_set()

    async def ready(self, timeout_s: float = PROBE_WAIT_S) -> bool:
        """Wait (bounded) for the probes; False if they have not answered by then."""
        if not self._done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), timeout_s)
        return self._done.is_set()


def make_engines(
    settings: Settings,
    environ: Mapping[str, str],
    given: Mapping[str, Executor] | None = None,
    sessions: SessionStore | None = None,
    *,
    presets: Iterable[Preset] = (),
    logged: Callable[[Phrase], str] = repr,
    warm: object | None = None,
    mcp_ahead: McpAhead | None = None,
    spawn_ahead: object | None = None,
) -> Engines:
    """Every registered engine's executor, not probed yet (``Engines.probe``); ``given``
    replaces the registry (a test's fake engine); ``sessions`` keeps the conversations of
    engines that keep their own; ``presets``: every model preset (each engine gets its own);
    ``logged``: a status line as the log says it; ``warm``: the warm agents' pool, if on;
    ``mcp_ahead``: starts a turn's MCP servers ahead of its agent; ``spawn_ahead``: an
    agent's process chain started ahead (both ``EngineConfig``)."""
    if given is not None:
        return Engines(given, logged)
    presets = tuple(presets)
    return Engines(
        {
            spec.name: spec.make(
                engine_config(
                    settings, spec, environ, sessions, presets, warm, mcp_ahead, spawn_ahead
                )
            )
            for spec in registry.ENGINES
        },
        logged,
    )


def containment_line(problem: Phrase | None) -> Phrase:
    """/status's line on whether an agent can outlive this process (``executors.pidns``)."""
    if problem is None:
        return Phrase("probe.contained")
    return Phrase("probe.may_outlive", {"problem": problem})


def git_line(confined: bool) -> Phrase:
    """/status's line on the bot's own git in task directories (``executors.gitguard``)."""
    return Phrase("probe.git_confined" if confined else "probe.git_open")


async def _probe(name: str, executor: Executor) -> tuple[bool, Phrase]:
    try:
        line = await executor.probe()
    except AgentNotInstalled as exc:
        if exc.off:
            return False, exc.off
        log.warning("%s CLI not found (DETACH_%s_BIN or PATH): unavailable", name, name.upper())
        return False, Phrase("probe.not_installed", {"engine": name})
    return True, line
