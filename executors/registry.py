"""The engines Detach can run, one line each. Everything engine-specific is derived from here:
the task commands (/claude, /codex) and their menu entries, ``engine=`` and ``--engine``, the
built-in model presets, the executors the composition root builds and the start-up probes
/status shows. Adding an engine is one module in executors/ declaring a ``SPEC`` plus one line
below, its settings class (``SPEC.settings``) among the bases of ``bot.settings.Settings``, and
its menu text, ``commands.<name>``, in each catalog."""

from __future__ import annotations

from bot.models import Preset
from bot.ports import EngineSpec
from executors import claude, codex, local

ENGINES: tuple[EngineSpec, ...] = (
    claude.SPEC,
    codex.SPEC,
    local.SPEC,
)


def names() -> tuple[str, ...]:
    return tuple(spec.name for spec in ENGINES)


def builtin_presets() -> tuple[Preset, ...]:
    return tuple(preset for spec in ENGINES for preset in spec.presets)
