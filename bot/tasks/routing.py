"""``engine=auto``: the task moved to the preset its preflight suggests, only ever down in price
and never to more rights than the owner gave it.

The verdict's suggestion is already checked (``bot.preflight.verdict``): a preset on offer (of
an engine that passed its probe here), priced, and no dearer than the task's own (else its
engine's dearest, as the money desk counts an unknown model). Here it is taken only when its
engine is not waiting for a usage limit and can honour the task's rights as planned: the same
approval mode (a sandboxed task goes only where the sandbox works: it is never widened to
``auto``, nor narrowed to ``ask``, which would wait for taps nobody expects) and no more weakly
held (``executors.registry.may_move``), and ``subtasks=yes`` only where `detach mcp` can be
given. An unpriced preset (a /local model with no ``price_*``) is
never a target: the money desk counts it at the dearest price of its engine; ``price_input = 0``
in its preset makes a model on your own machine free, and the cheapest target."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from bot.models import ApprovalMode, Engine, NewTask, Phrase, Preset
from bot.tasks.defaults import TaskDefaults
from bot.turns.queue import TurnQueue
from executors.registry import may_move


class TaskRouter:
    def __init__(self, queue: TurnQueue, defaults: TaskDefaults) -> None:
        self._queue = queue
        self._defaults = defaults

    async def target(self, new: NewTask, chosen: Preset | None) -> Preset | None:
        """``chosen`` if ``new`` may move to it; None: it stays where it was planned."""
        if chosen is None or chosen.name == new.preset:
            return None
        if chosen.engine == new.engine and new.preset is None and chosen.model == new.model:
            return None
        if await self._queue.limited_until(chosen.engine) is not None:
            return None
        if chosen.engine != new.engine and not self.honours(chosen.engine, new):
            return None
        return chosen

    def honours(self, engine: Engine, new: NewTask) -> bool:
        """``engine`` can run ``new`` with the rights it was planned with, no wider, no other,
        and holds its mode at least as strongly as its own engine (``may_move``)."""
        if not may_move(new.approval_mode, new.engine, engine):
            return False
        sandbox_problem: Callable[[Engine], Phrase | str | None] = self._defaults.sandbox_problem
        if new.approval_mode is ApprovalMode.SANDBOX and sandbox_problem(engine) is not None:
            return False
        return not new.subtasks or engine in self._defaults.subtask_engines


def moved(new: NewTask, to: Preset) -> NewTask:
    """``new`` on ``to``: its engine, preset and model."""
    return replace(new, engine=to.engine, preset=to.name, model=to.model)
