"""What a turn's tokens cost, whatever its engine.

A turn is priced as the model its engine named (``SessionStarted.model``: Claude's init line,
the thread Codex started, the local engine's endpoint model; an engine that is not told names
its configured default), else as its task's preset. That model is matched to a preset of the
engine: the task's own preset when it is that model, else the presets whose model or name it
is (exactly, or as an alias the engine resolved: ``sonnet`` → ``claude-sonnet-4-5``), the
dearest when several are. A model that no priced preset matches is *unpriced*: the card and
/spend say so, and the daily cap, the task's budget and the totals count its tokens at the
price of the dearest priced preset of its engine (of all engines when its own has none) —
never as free. An engine that reports its own cost (Claude) is taken at its word.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from bot.events import AgentEvent, SessionStarted, Usage, UsageUpdated
from bot.models import Engine, Preset

ALIAS_EDGE = r"[-/:_]"  # what separates an alias from the rest of a resolved model name


@dataclass(frozen=True, slots=True)
class Charge:
    """What a turn's tokens came to: ``cost_usd`` (None: no tokens and no cost to count);
    ``unpriced``: the model has no known price and ``cost_usd`` is what the caps count."""

    cost_usd: float | None
    unpriced: bool = False
    model: str | None = None


def dearness(preset: Preset) -> tuple[float, float, float, str]:
    return (
        preset.price_input + preset.price_output,
        preset.price_cache_write,
        preset.price_cache_read,
        preset.name,
    )


class PriceList:
    """The presets' prices, by engine and model."""

    def __init__(self, presets: Iterable[Preset]) -> None:
        self._presets = tuple(presets)

    def match(self, engine: Engine, model: str | None, chosen: Preset | None) -> Preset | None:
        """The priced preset ``model`` of ``engine`` is priced by, or None (unpriced)."""
        chosen = chosen if chosen is not None and chosen.engine == engine else None
        wanted = (model or (chosen.model if chosen else "")).strip().lower()
        if not wanted:
            return chosen if chosen is not None and chosen.priced else None
        if chosen is not None and _names(chosen, wanted):
            found: list[Preset] = [chosen]
        else:
            own = [p for p in self._presets if p.engine == engine]
            found = [p for p in own if wanted in (p.model.lower(), p.name.lower())]
            found = found or [p for p in own if _alias(p.model.lower(), wanted)]
        priced = [p for p in found if p.priced]
        return max(priced, key=dearness) if priced else None

    def dearest(self, engine: Engine) -> Preset | None:
        """What an unpriced model of ``engine`` is counted at."""
        priced = [p for p in self._presets if p.priced]
        own = [p for p in priced if p.engine == engine]
        return max(own or priced, key=dearness) if own or priced else None


class Meter:
    """One turn's pricing: the model it is priced as (known once the engine names it) and the
    tokens used so far (engines that report usage while they run)."""

    def __init__(self, prices: PriceList, engine: Engine, chosen: Preset | None) -> None:
        self._prices = prices
        self._engine = engine
        self._chosen = chosen
        self.model: str | None = chosen.model if chosen is not None else None
        self._preset = prices.match(engine, None, chosen)
        self.usage = Usage()

    def named(self, model: str | None) -> None:
        """The engine named the model it runs."""
        if model:
            self.model = model
            self._preset = self._prices.match(self._engine, model, self._chosen)

    def used(self, usage: Usage) -> None:
        self.usage = usage

    def observe(self, event: AgentEvent) -> None:
        """The engine's events that price the turn: the model it names, the tokens so far."""
        if isinstance(event, SessionStarted):
            self.named(event.model)
        elif isinstance(event, UsageUpdated):
            self.used(event.usage)

    def charge(self, usage: Usage | None = None, reported_usd: float | None = None) -> Charge:
        """What ``usage`` (else the tokens used so far) costs; ``reported_usd``: the engine's
        own figure, which wins."""
        usage = usage if usage is not None else self.usage
        if reported_usd is not None:
            return Charge(reported_usd, False, self.model)
        if usage == Usage():
            return Charge(None, False, self.model)
        if self._preset is not None:
            return Charge(self._preset.cost_usd(usage), False, self.model)
        dearest = self._prices.dearest(self._engine)
        return Charge(dearest.cost_usd(usage) if dearest else None, True, self.model)


def _names(preset: Preset, wanted: str) -> bool:
    return wanted in (preset.model.lower(), preset.name.lower()) or _alias(
        preset.model.lower(), wanted
    )


def _alias(short: str, wanted: str) -> bool:
    """``short`` (a preset's model, such as ``sonnet``) is a part of the resolved ``wanted``."""
    pattern = f"(?:^|{ALIAS_EDGE}){re.escape(short)}(?:$|{ALIAS_EDGE})"
    return bool(short) and re.search(pattern, wanted) is not None
