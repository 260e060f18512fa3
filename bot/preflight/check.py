"""One preflight of one goal: prompt, call, verdict; a failure is an outcome, never an error."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bot.errors import PreflightFailed
from bot.models import Phrase, Preset
from bot.preflight.call import Answer
from bot.preflight.prompt import build_prompt, listing
from bot.preflight.verdict import Verdict, parse_verdict

log = logging.getLogger(__name__)


class Asker(Protocol):
    """What runs the preflight's prompt on a model (``ClaudePreflight``)."""

    async def ask(self, prompt: str, preset: Preset) -> Answer: ...


@dataclass(frozen=True, slots=True)
class Outcome:
    """``verdict``, or None and ``skipped`` (why: the task starts as without a preflight);
    ``cost_usd``: what the call cost, whatever its verdict; ``elapsed_s``: how long it took;
    ``why``: ``skipped`` for the chat, in its language."""

    verdict: Verdict | None
    skipped: str = ""
    cost_usd: float | None = None
    elapsed_s: float = 0.0
    why: Phrase | None = None


class Preflight:
    """``asker`` runs the prompt on ``preset`` (DETACH_PREFLIGHT_MODEL)."""

    def __init__(self, asker: Asker, preset: Preset) -> None:
        self._asker = asker
        self.preset = preset

    async def check(
        self,
        goal: str,
        cwd: Path,
        offered: Sequence[Preset],
        default: Preset | None,
        remaining_usd: float | None,
    ) -> Outcome:
        """The verdict on ``goal`` run in ``cwd``; ``offered``: the presets the task may use,
        ``default``: the chat's (the dearest a suggestion may be). Never raises for the model's
        or the CLI's failures: the outcome says it was skipped and why."""
        started = time.monotonic()
        names = await asyncio.to_thread(listing, cwd)
        prompt = build_prompt(goal, cwd, names, offered, remaining_usd)
        cost: float | None = None
        try:
            answer = await self._asker.ask(prompt, self.preset)
            cost = answer.cost_usd
            verdict = parse_verdict(answer.text, offered, default)
        except PreflightFailed as exc:
            log.warning("preflight skipped: %s", exc.reason)
            return Outcome(None, exc.reason, cost, time.monotonic() - started, exc.said)
        log.info("preflight: %s (%.1f s)", verdict.decision, time.monotonic() - started)
        return Outcome(verdict, "", cost, time.monotonic() - started)
