"""A walk-away task's preflight, between its plan and its start, the same whichever door it came
by: the verdict on its acknowledgement, or a question, refusal or estimate over its budget that
holds it, and the owner's answer (or the wait's end) that starts it."""

from __future__ import annotations

import html
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from bot.models import Engine, NewTask, Preset, Task, TaskKind
from bot.money.desk import MoneyDesk
from bot.preflight.check import Outcome
from bot.preflight.desk import PreflightDesk
from bot.preflight.files import HeldAttachments
from bot.preflight.gate import PreflightGate
from bot.store import Store, TaskFileRow
from bot.store.preflights import PreflightHold
from bot.tasks.defaults import AUTO
from bot.tasks.lookup import TaskLookup
from bot.tasks.options import flag, split_options
from bot.tasks.routing import TaskRouter, moved

log = logging.getLogger(__name__)
Plan = Callable[..., Awaitable[NewTask]]  # ``TaskPlanner.plan``


class Start(Protocol):
    """``TaskCreator.start``: a planned task created and its first turn queued."""

    async def __call__(
        self,
        new: NewTask,
        reply_to: int | None = None,
        attachments: Sequence[Path] = (),
        hold_s: float = 0.0,
    ) -> Task: ...


class PreflightStep:
    def __init__(
        self,
        gate: PreflightGate,
        *,
        router: TaskRouter,
        start: Start,
        plan: Plan,
        lookup: TaskLookup,
        money: MoneyDesk,
        engines: Collection[Engine],
        store: Store,
        kept: Path,
    ) -> None:
        """``start``: what creates a task whose preflight let it go; ``plan``: a held command
        of before planned again; ``engines``: those tasks may use here; ``kept``: where a held
        task's attachments wait."""
        self._gate = gate
        self._router = router
        self._start = start
        self._plan = plan
        self._lookup = lookup
        self._money = money
        self._engines = engines
        self._store = store
        self.desk: PreflightDesk = gate.desk
        self._files = HeldAttachments(kept)
        gate.desk.bind(self)

    def wanted(self, kind: TaskKind, engine_given: bool, options: dict[str, str]) -> bool:
        """Walk-away tasks only (never /claude, /codex), when on, or ``preflight=yes``, or
        ``engine=auto`` (the preflight routes it)."""
        walk_away = kind is TaskKind.DETACH and not engine_given
        auto = options.get("engine", "").lower() == AUTO
        return walk_away and flag(options, "preflight", self._gate.enabled or auto)

    async def start(
        self,
        new: NewTask,
        reply_to: int | None = None,
        attachments: Sequence[Path] = (),
        route: bool = False,
        file: TaskFileRow | None = None,
    ) -> Task | PreflightHold:
        """Run the preflight, then start ``new`` with its verdict on the acknowledgement; or,
        when the verdict asks, refuses or estimates more than the task has left, hold it (with
        its ``attachments`` and the task ``file`` it came from) for its owner's answer.
        ``route`` (``engine=auto``): a go moves to the preset the preflight suggests
        (``bot.tasks.routing``). The call's cost is the task's first spend."""
        gate = self._gate
        if reply_to is not None and (held := await self._held(new.chat_id, reply_to)):
            return held  # Telegram delivered the command again: it is held already
        await self._money.check_daily_cap(new.owner_id)  # not a cent past the cap
        outcome = await gate.check(new)  # bounded; a failure is said, never raised
        planned = new
        if route:
            new = await self._routed(new, outcome)
        over = "" if gate.holds(outcome) else await self._over_budget(new, outcome)
        if gate.holds(outcome) or over:
            hold = await gate.desk.hold(
                new, outcome, reply_to=reply_to, over_budget=over, file=file
            )
            self._files.keep(hold.id, attachments)
            return hold
        new = replace(gate.noted(new, outcome), spent_usd=outcome.cost_usd or 0.0)
        moved = (new.engine, new.preset) != (planned.engine, planned.preset)
        grace_s = gate.route_grace_s if moved else 0.0
        task = await self._start(new, reply_to, attachments, hold_s=grace_s)
        await gate.charge(task, outcome.cost_usd)
        if grace_s:  # the owner may move it back to where it was planned until it starts
            await gate.desk.offer_default(task, planned.engine, planned.preset)
        return task

    async def _held(self, chat_id: int, reply_to: int) -> PreflightHold | None:
        return await self._store.preflights.held(chat_id, reply_to)

    async def run_default(self, user_id: int, task_id: int, engine: str, preset: str) -> str:
        """ "Run on <default> instead": the routed task goes back to ``engine`` and ``preset``
        (where it was planned) if it has not started; the key of the tap's answer. The button's
        data is checked as a typed ``model=`` would be: a known preset of that engine, an
        engine here that can run the task with its rights."""
        task = await self._lookup.get_own(user_id, task_id)
        chosen = self._money.catalog.get(preset) if preset else None
        if (preset and (chosen is None or chosen.engine != engine)) or (
            engine not in self._engines
        ):
            return "preflight.gone"
        planned = NewTask(
            task.owner_id, task.chat_id, engine, task.kind, "", Path(task.cwd),
            approval_mode=task.approval_mode, subtasks=task.subtasks,
        )  # fmt: skip
        if not self._router.honours(engine, planned):
            return "preflight.gone"
        moved = await self._reroute(task, engine, chosen)
        if moved is None:
            return "preflight.back_late"
        routed = self._money.catalog.get(task.preset)
        name = preset or engine
        if routed is not None:
            was = self._gate.routed_line(task.locale, routed, name)
            line = self._gate.back_line(task.locale, name)
            await self._gate.desk.moved_back(moved, was, line)
        return "preflight.back_done"

    async def _reroute(self, task: Task, engine: Engine, preset: Preset | None) -> Task | None:
        """``task``, none of whose turns started, on ``engine`` (``preset``); None: too late."""
        moved = await self._store.tasks.reroute(
            task.id, engine, preset.name if preset else None, preset.model if preset else None
        )
        if moved is not None:
            await self._store.audit.record("rerouted", task.owner_id, task.id, engine)
            log.info("task %s: moved back to %s before it started", task.id, engine)
        return moved

    async def _over_budget(self, new: NewTask, outcome: Outcome) -> str:
        """The message asking before a go whose estimate is more than the task may spend: its
        budget less the preflight's cost, or what the daily cap leaves; "" when it fits."""
        verdict = outcome.verdict
        estimate = verdict.estimate_usd if verdict is not None else None
        if estimate is None:
            return ""
        cost = outcome.cost_usd or 0.0
        lefts = [await self._money.daily_left(new.owner_id)]
        lefts.append(new.max_usd - cost if new.max_usd is not None else None)
        left = min((x for x in lefts if x is not None), default=None)
        if left is None or estimate <= left:
            return ""
        return self._gate.over_budget_text(new.locale, estimate, max(left, 0.0))

    async def _routed(self, new: NewTask, outcome: Outcome) -> NewTask:
        """``new`` on the preset the preflight suggests when it may move there, with one line
        on its acknowledgement saying so; else ``new`` unchanged."""
        chosen = outcome.verdict.preset if outcome.verdict is not None else None
        target = await self._router.target(new, chosen)
        if target is None:
            return new
        line = self._gate.routed_line(new.locale, target, new.preset or new.engine)
        return self._gate.noted_line(moved(new, target), line)

    async def start_held(self, hold: PreflightHold, more: str, line: str) -> Task:
        """A held task, started by the owner's answer (or the wait's end): ``more`` added to
        its goal, ``line`` on its acknowledgement, its preflight's cost its first spend."""
        new = hold.task or await self._planned(hold)
        origin = html.escape(line, quote=False)  # its own line, right under the goal
        new = replace(
            new,
            origin=f"{new.origin}\n{origin}" if new.origin else origin,
            prompt=new.prompt + more,
            title=new.title or new.prompt,
            spent_usd=hold.cost_usd or 0.0,
        )
        task = await self._start(new, hold.reply_to, self._files.of(hold.id))
        self.forget(hold)
        await self._gate.charge(task, hold.cost_usd)
        await record_file(self._store, task, hold.file)
        return task

    def forget(self, hold: PreflightHold) -> None:
        self._files.forget(hold.id)

    async def _planned(self, hold: PreflightHold) -> NewTask:
        """A hold of before (the chat's command as typed): planned again from its text."""
        options, words = split_options(hold.text) if hold.with_options else ({}, hold.text)
        return await self._plan(
            hold.owner_id, hold.chat_id, TaskKind.DETACH, options, words, hold.locale, "detach"
        )

    async def tap(self, user_id: int, hold_id: int, choice: int) -> str:
        """A choice of a held task (its buttons, a /pending copy's, the board's); the key of
        the tap's answer."""
        return await self.desk.on_button(user_id, hold_id, choice)

    async def answered(self, user_id: int, chat_id: int, message_id: int, text: str) -> bool:
        """A reply to a preflight's question answers it; False: ``message_id`` is none."""
        return bool(text.strip()) and await self.desk.on_reply(user_id, chat_id, message_id, text)


async def record_file(store: Store, task: Task, file: TaskFileRow | None) -> None:
    """The task file ``task`` came from, remembered (its finished file is written back)."""
    if file is None:
        return
    await store.task_files.add(replace(file, task_id=task.id))
    await store.audit.record("task_file", task.owner_id, task.id, file.source)
