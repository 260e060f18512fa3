"""The engines this process runs: each registered engine's configuration from Settings and the
environment, its executor, and the start-up probes (run concurrently) that decide which are
available and what /status says."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from collections.abc import Mapping
from typing import Any

from bot.errors import AgentNotInstalled
from bot.ports import EngineConfig, EngineSpec, Executor, SessionStore
from bot.settings import Settings
from executors import registry

log = logging.getLogger(__name__)


def engine_config(
    settings: Settings,
    spec: EngineSpec,
    environ: Mapping[str, str],
    process_env: Mapping[str, str],
    sessions: SessionStore | None = None,
) -> EngineConfig:
    """An engine's configuration: its ``DETACH_<NAME>_*`` settings (fields of Settings, or
    variables of the bot's own environment for an engine Settings does not know)."""
    prefix, env_prefix = f"{spec.name}_", f"DETACH_{spec.name.upper()}_"
    options: dict[str, Any] = {
        key[len(env_prefix) :].lower(): value
        for key, value in process_env.items()
        if key.startswith(env_prefix)
    }
    options.update(
        {
            name[len(prefix) :]: value
            for name, value in settings
            if name.startswith(prefix) and value is not None
        }
    )
    found = shutil.which(spec.default_binary) if spec.default_binary else None  # none: no CLI
    binary = options.get("bin") or found
    return EngineConfig(
        binary=str(binary) if binary else None,
        environ=environ,
        secrets=settings.secret_values(),
        cancel_grace_s=settings.cancel_grace_s,
        options=options,
        sessions=sessions,
    )


async def make_executors(
    settings: Settings,
    environ: Mapping[str, str],
    given: Mapping[str, Executor] | None = None,
    sessions: SessionStore | None = None,
) -> tuple[dict[str, Executor], list[str]]:
    """The engines that pass their probe on this machine (probed concurrently), and a status
    line for each; ``given`` replaces the registry (a test's fake engine); ``sessions`` keeps
    the conversations of engines that keep their own."""
    if given is not None:
        candidates = dict(given)
    else:
        candidates = {
            spec.name: spec.make(engine_config(settings, spec, environ, os.environ, sessions))
            for spec in registry.ENGINES
        }
    probes = await asyncio.gather(
        *(_probe(name, executor) for name, executor in candidates.items())
    )
    executors = {
        name: candidates[name] for name, (ok, _) in zip(candidates, probes, strict=True) if ok
    }
    return executors, [line for _, line in probes]


async def _probe(name: str, executor: Executor) -> tuple[bool, str]:
    try:
        line = await executor.probe()
    except AgentNotInstalled as exc:
        if exc.off:
            log.info("%s: %s", name, exc.off)
            return False, f"{name}: {exc.off}"
        log.warning("%s CLI not found (DETACH_%s_BIN or PATH): unavailable", name, name.upper())
        return False, f"{name}: not installed"
    log.info("%s", line)
    return True, line
