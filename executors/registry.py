"""The engines Detach can run, one line each. Everything engine-specific is derived from here:
the task commands (/claude, /codex) and their menu entries, ``engine=`` and ``--engine``, the
built-in model presets, the executors the composition root builds and the start-up probes
/status shows. Adding an engine is one module in executors/ declaring a ``SPEC`` plus one line
below, its settings class (``SPEC.settings``) among the bases of ``bot.settings.Settings``, and
its menu text, ``commands.<name>``, in each catalog."""

from __future__ import annotations

from bot.models import ApprovalMode, Preset
from bot.ports import EngineSpec, Isolation
from executors import claude, codex, local, managed

ENGINES: tuple[EngineSpec, ...] = (
    claude.SPEC,
    codex.SPEC,
    local.SPEC,
    managed.SPEC,
)


def names() -> tuple[str, ...]:
    return tuple(spec.name for spec in ENGINES)


def ack_note(engine: str) -> str:
    """The catalog key ``engine`` adds to a task's acknowledgement ("": none)."""
    return next((spec.ack_note for spec in ENGINES if spec.name == engine), "")


def builtin_presets() -> tuple[Preset, ...]:
    return tuple(preset for spec in ENGINES for preset in spec.presets)


def isolation(engine: str, mode: ApprovalMode) -> Isolation | None:
    """How strongly ``engine`` holds a task of ``mode`` (None: it declares none, or is unknown)."""
    spec = next((spec for spec in ENGINES if spec.name == engine), None)
    return spec.isolation.get(mode) if spec is not None else None


def may_move(mode: ApprovalMode, engine: str, to: str) -> bool:
    """The rule every router keeps (preflight, ``engine=auto``, the usage-limit hand-over): a
    task of ``mode`` on ``engine`` may move to ``to`` only if ``to`` holds that mode at least
    as strongly (``EngineSpec.isolation``); an engine that declares no strength is none's."""
    if to == engine:
        return True
    own, target = isolation(engine, mode), isolation(to, mode)
    return own is not None and target is not None and target >= own
