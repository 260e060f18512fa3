"""A held task's message, drawn from its hold's row: what it waits for, then the question with
its suggested answers, the refusal, or the estimate over the budget, then the goal held (and
where it came from); every hold has "Start anyway" and "Drop". Nothing here sends or stores;
the original, its /pending copies and the board carry the same choices, so a tap anywhere is a
tap on the original."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bot.models import MessageKind, PreflightDecision, WaitState
from bot.store.preflights import PreflightHold
from bot.telegram.callbacks import Id
from bot.telegram.markup import CallbackData, Keyboard
from bot.telegram.policies import ChatPolicies
from bot.telegram.render import plain as unhtml
from bot.telegram.render import shorten
from bot.telegram.texts import Texts

ANYWAY = 9  # the choice of "Start anyway" (0..3: a suggested answer)
DROP = 8  # the choice of "Drop": the task is never started
OVER_BUDGET = "budget"  # a hold's decision: a go whose estimate is more than the task has left
GOAL_CHARS = 300  # of the goal the message repeats


class PreflightAction(CallbackData, prefix="pf"):
    hold_id: Id
    choice: Annotated[int, Field(ge=0, le=ANYWAY)]


def hold_body(texts: Texts, hold: PreflightHold, wait_s: float) -> str:
    """The hold's message: what it waits for, its question (which waits ``wait_s``), its
    estimate over the budget or its refusal, and the goal held with its origin."""
    head = "⏸ " + texts.template(hold.locale, f"wait.{WaitState.PREFLIGHT.value}")
    goal = shorten(hold.text, GOAL_CHARS, one_line=True)
    origin = hold.task.origin if hold.task is not None else None
    tail = f"↩️ {goal}" + (f"\n{unhtml(origin)}" if origin else "")
    return f"{head}\n{verdict_text(texts, hold, wait_s)}\n\n{tail}"


def verdict_text(texts: Texts, hold: PreflightHold, wait_s: float) -> str:
    """What the preflight said that holds the task, in one paragraph."""
    if hold.decision == OVER_BUDGET:
        return hold.reason
    if hold.decision == PreflightDecision.ASK.value:
        minutes = max(1, round(wait_s / 60))
        return plain(
            texts, hold.locale, "preflight.question", question=hold.question, minutes=minutes
        )
    return plain(texts, hold.locale, "preflight.refusal", reason=hold.reason)


def hold_choices(texts: Texts, hold: PreflightHold) -> list[tuple[int, str]]:
    """The hold's choices and their captions: each suggested answer, "Start anyway", "Drop"."""
    anyway = texts.template(hold.locale, "preflight.anyway")
    drop = texts.template(hold.locale, "preflight.drop")
    return [*enumerate(hold.answers), (ANYWAY, anyway), (DROP, drop)]


def hold_keyboard(texts: Texts, hold: PreflightHold) -> Keyboard:
    """One row per suggested answer, then "Start anyway" and "Drop"."""
    buttons = [
        PreflightAction(hold_id=hold.id, choice=choice).button(caption)
        for choice, caption in hold_choices(texts, hold)
    ]
    *answers, anyway, drop = buttons
    return Keyboard.of([*([a] for a in answers), [anyway, drop]])


async def silent(policies: ChatPolicies | None, chat_id: int, kind: MessageKind) -> bool:
    """A message of ``kind`` goes to the chat without a sound (its /notify choice; none: every
    message buzzes)."""
    return policies is not None and await policies.silent(chat_id, kind)


def plain(texts: Texts, locale: str, key: str, **params: object) -> str:
    """The text ``key`` with ``params`` filled in, as plain text (no HTML escaping)."""
    return texts.template(locale, key).format(**params)
