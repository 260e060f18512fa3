"""Where a walk-away task meets its preflight: whether it gets one, the line its acknowledgement
shows, and the call's cost recorded as the task's spend."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection

from bot.models import Engine, NewTask, Phrase, PreflightDecision, Preset, Task
from bot.money.desk import MoneyDesk
from bot.money.pricing import dearness
from bot.preflight.check import Outcome, Preflight
from bot.preflight.desk import PreflightDesk
from bot.store import Store
from bot.telegram.render import plain, usd
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)


class PreflightGate:
    """``enabled``: DETACH_PREFLIGHT, the default of a task's ``preflight=yes|no`` (walk-away
    tasks only, whichever door they come by: the create use case asks); ``engines``: the engines
    tasks may use here (the presets offered to the model are theirs)."""

    def __init__(
        self,
        preflight: Preflight,
        *,
        enabled: bool,
        money: MoneyDesk,
        store: Store,
        texts: Texts,
        engines: Collection[Engine],
        desk: PreflightDesk,
        route_grace_s: float = 0.0,
    ) -> None:
        self._preflight = preflight
        self.enabled = enabled
        self._money = money
        self._store = store
        self._texts = texts
        self._engines = engines
        self.desk = desk
        # DETACH_PREFLIGHT_ROUTE_GRACE_S: a routed task waits this long before it starts, with
        # "Run on <default> instead" on its acknowledgement (0: it starts at once, no button)
        self.route_grace_s = route_grace_s

    def offered(self) -> tuple[Preset, ...]:
        return tuple(p for p in self._money.catalog.all() if p.engine in self._engines)

    async def check(self, new: NewTask) -> Outcome:
        """The preflight of ``new`` (never raises for the model's failures)."""
        # the task's preset, else (the CLI's own default model) its engine's dearest, as the
        # money desk counts an unknown model
        default = self._money.catalog.get(new.preset) or self._money.counted_as(new.engine)
        return await self._preflight.check(
            new.prompt, new.cwd, self.offered(), default, new.max_usd
        )

    def noted(self, new: NewTask, outcome: Outcome) -> NewTask:
        """``new`` with the preflight's line added to its acknowledgement's note."""
        return self.noted_line(new, self.line(new.locale, outcome))

    @staticmethod
    def noted_line(new: NewTask, line: str) -> NewTask:
        return dataclasses.replace(new, note=f"{new.note}\n{line}" if new.note else line)

    @staticmethod
    def holds(outcome: Outcome) -> bool:
        """The verdict holds the task for the owner: a question, or a refusal."""
        verdict = outcome.verdict
        return verdict is not None and verdict.decision is not PreflightDecision.GO

    def line(self, locale: str, outcome: Outcome) -> str:
        """One plain-text line (the notifier escapes it): what the preflight said."""
        verdict = outcome.verdict
        if verdict is None:
            why = outcome.skipped if outcome.why is None else self._said(locale, outcome.why)
            return self._plain(locale, "preflight.skipped", reason=why)
        if verdict.decision is PreflightDecision.ASK:
            return self._plain(locale, "preflight.asked", question=verdict.question)
        if verdict.decision is PreflightDecision.REFUSE:
            return self._plain(locale, "preflight.refused", reason=verdict.reason)
        amount = "?" if verdict.estimate_usd is None else usd(verdict.estimate_usd)
        minutes = "?" if verdict.estimate_minutes is None else f"{verdict.estimate_minutes:.0f}"
        return self._plain(locale, "preflight.go", usd=amount, minutes=minutes)

    def routed_line(self, locale: str, chosen: Preset, instead: str) -> str:
        """Where the preflight moved the task, and why, in one line."""
        return self._plain(
            locale, "preflight.routed", preset=chosen.name, engine=chosen.engine, default=instead
        )

    def back_line(self, locale: str, name: str) -> str:
        """The acknowledgement's line once the owner moved the task back to ``name``."""
        return self._plain(locale, "preflight.moved_back", default=name)

    def over_budget_text(self, locale: str, estimate_usd: float, left_usd: float) -> str:
        """The question before a task whose estimate is more than it has left."""
        return self._plain(
            locale, "preflight.over_budget", usd=usd(estimate_usd), left=usd(left_usd)
        )

    async def charge(self, task: Task, cost_usd: float | None) -> None:
        """The preflight's cost, recorded as spend of ``task`` (its first turn's) for the daily
        cap and /spend; the task's own total has it from its creation (``NewTask.spent_usd``)."""
        if not cost_usd:
            return
        turn = await self._store.tasks.last_turn(task.id)
        if turn is None:
            return
        await self._store.spend.record(
            task.owner_id,
            task.id,
            turn.id,
            cost_usd,
            0,
            0,
            engine=self._preflight.preset.engine,
            model=self._preflight.preset.model,
            unpriced=not self._preflight.preset.priced,  # counted at its engine's dearest
        )

    def _plain(self, locale: str, key: str, **params: str) -> str:
        return self._texts.template(locale, key).format(**params)

    def _said(self, locale: str, phrase: Phrase) -> str:
        return plain(self._texts.say(locale, phrase))


def preflight_preset(presets: Collection[Preset], named: str) -> Preset | None:
    """DETACH_PREFLIGHT_MODEL's preset, or ("") the cheapest priced Claude preset."""
    if named:
        return next((p for p in presets if p.name == named), None)
    claude = [p for p in presets if p.engine == "claude" and p.priced]
    return min(claude, key=dearness) if claude else None
