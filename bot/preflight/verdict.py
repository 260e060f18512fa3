"""The preflight's verdict, read strictly from the model's JSON answer.

The model's answer is hostile input: it must be one JSON object of the documented shape (else
``PreflightFailed``); its texts are cut to fixed lengths and stripped of control characters (they
are shown as plain text); its engine and preset suggestion is kept only when it names a preset
on offer that costs no more than the chat's default (routing only ever goes down).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.errors import PreflightFailed
from bot.models import PreflightDecision, Preset
from bot.money.pricing import dearness

QUESTION_MAX = 300  # characters of the question, and of a refusal's reason
ANSWER_MAX = 60  # characters of one suggested answer (a button's text)
ANSWERS_MAX = 4
ANSWER_TEXT_MAX = 16_000  # characters of the whole JSON answer the parser reads
ESTIMATE_USD_MAX = 10_000.0
ESTIMATE_MINUTES_MAX = 7 * 24 * 60.0
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]+")
_FENCE = re.compile(r"\A```(?:json)?\s*\n(.*)\n```\Z", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Verdict:
    """``decision``; for ``ask``: ``question`` and up to four ``answers``; for ``refuse``:
    ``reason``; ``preset``: a cheaper-or-equal preset on offer the model suggests (None: keep
    the default); ``estimate_usd`` and ``estimate_minutes``: None when not given."""

    decision: PreflightDecision
    question: str = ""
    answers: tuple[str, ...] = ()
    reason: str = ""
    preset: Preset | None = None
    estimate_usd: float | None = None
    estimate_minutes: float | None = None


def parse_verdict(text: str, offered: Sequence[Preset], default: Preset | None) -> Verdict:
    """The verdict in ``text`` (one JSON object, alone or in one ```json fence).

    ``offered``: the presets the task may run on; ``default``: the chat's default preset, the
    dearest a suggestion may be (None: no suggestion is kept). Raises ``PreflightFailed`` for
    anything that is not a verdict: not JSON, not an object, an unknown decision, a field of
    the wrong type, an ``ask`` without a question or a ``refuse`` without a reason."""
    body = text.strip()
    if len(body) > ANSWER_TEXT_MAX:
        raise PreflightFailed("answer too long")
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise PreflightFailed("answer is not JSON") from None
    if not isinstance(data, dict):
        raise PreflightFailed("answer is not a JSON object")
    try:
        decision = PreflightDecision(_string(data, "verdict"))
    except ValueError:
        raise PreflightFailed("unknown verdict") from None
    question = _clean(_string(data, "question"), QUESTION_MAX)
    reason = _clean(_string(data, "reason"), QUESTION_MAX)
    answers = _answers(data.get("answers"))
    if decision is PreflightDecision.ASK and not question:
        raise PreflightFailed("ask without a question")
    if decision is PreflightDecision.REFUSE and not reason:
        raise PreflightFailed("refuse without a reason")
    return Verdict(
        decision=decision,
        question=question if decision is PreflightDecision.ASK else "",
        answers=answers if decision is PreflightDecision.ASK else (),
        reason=reason if decision is PreflightDecision.REFUSE else "",
        preset=_suggested(data, offered, default),
        estimate_usd=_number(data, "estimate_usd", ESTIMATE_USD_MAX),
        estimate_minutes=_number(data, "estimate_minutes", ESTIMATE_MINUTES_MAX),
    )


def _string(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise PreflightFailed(f"{key} is not a string")
    return value


def _clean(text: str, limit: int) -> str:
    """One line of plain text, at most ``limit`` characters."""
    flat = " ".join(_CONTROL.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _answers(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PreflightFailed("answers is not a list of strings")
    cleaned = [_clean(v, ANSWER_MAX) for v in value]
    unique = list(dict.fromkeys(a for a in cleaned if a))
    return tuple(unique[:ANSWERS_MAX])


def _number(data: dict[str, Any], key: str, ceiling: float) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PreflightFailed(f"{key} is not a number")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise PreflightFailed(f"{key} is out of range")
    return min(number, ceiling)


def _suggested(
    data: dict[str, Any], offered: Sequence[Preset], default: Preset | None
) -> Preset | None:
    """The suggested preset if it is on offer (and of the engine named, if one is) and no
    dearer than ``default``; otherwise None: the suggestion is ignored, never an error."""
    name, engine = data.get("preset"), data.get("engine")
    if default is None or not isinstance(name, str):
        return None
    chosen = next((p for p in offered if p.name == name), None)
    if chosen is None or (isinstance(engine, str) and engine and engine != chosen.engine):
        return None
    if not chosen.priced or dearness(chosen)[:3] > dearness(default)[:3]:
        return None
    return chosen
