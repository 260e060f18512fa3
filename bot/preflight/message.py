"""A held command's message, drawn from its hold's row: the question with its suggested answers,
the refusal, or the estimate over the budget, each with "Start anyway" (and "Cancel" under an
estimate), and whether it buzzes. Nothing here sends or stores; the original and its /pending
copies carry the same buttons, so a tap on a copy is a tap on the original."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from bot.models import MessageKind, PreflightDecision
from bot.store.preflights import PreflightHold
from bot.telegram.callbacks import Id
from bot.telegram.markup import CallbackData, Keyboard
from bot.telegram.policies import ChatPolicies
from bot.telegram.texts import Texts

ANYWAY = 9  # the choice of "Start anyway" (0..3: a suggested answer)
CANCEL = 8  # the choice of "Cancel" (an estimate over the budget)
OVER_BUDGET = "budget"  # a hold's decision: a go whose estimate is more than the task has left


class PreflightAction(CallbackData, prefix="pf"):
    hold_id: Id
    choice: Annotated[int, Field(ge=0, le=ANYWAY)]


def hold_body(texts: Texts, hold: PreflightHold, wait_s: float) -> str:
    """The hold's message: its question (which waits ``wait_s``), its estimate over the budget,
    or its refusal."""
    if hold.decision == OVER_BUDGET:
        return hold.reason
    if hold.decision == PreflightDecision.ASK.value:
        minutes = max(1, round(wait_s / 60))
        return plain(
            texts, hold.locale, "preflight.question", question=hold.question, minutes=minutes
        )
    return plain(texts, hold.locale, "preflight.refusal", reason=hold.reason)


def hold_keyboard(texts: Texts, hold: PreflightHold) -> Keyboard:
    """One row per suggested answer, then "Start anyway" (with "Cancel" over the budget)."""
    rows = [
        [PreflightAction(hold_id=hold.id, choice=i).button(a)] for i, a in enumerate(hold.answers)
    ]
    anyway = texts.template(hold.locale, "preflight.anyway")
    rows.append([PreflightAction(hold_id=hold.id, choice=ANYWAY).button(anyway)])
    if hold.decision == OVER_BUDGET:
        cancel = texts.template(hold.locale, "preflight.cancel")
        rows[-1].append(PreflightAction(hold_id=hold.id, choice=CANCEL).button(cancel))
    return Keyboard.of(rows)


async def silent(policies: ChatPolicies | None, chat_id: int, kind: MessageKind) -> bool:
    """A message of ``kind`` goes to the chat without a sound (its /notify choice; none: every
    message buzzes)."""
    return policies is not None and await policies.silent(chat_id, kind)


def plain(texts: Texts, locale: str, key: str, **params: object) -> str:
    """The text ``key`` with ``params`` filled in, as plain text (no HTML escaping)."""
    return texts.template(locale, key).format(**params)
