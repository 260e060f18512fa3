"""The owner's side of the stall watchdog: its buttons, Stop and "Keep waiting" (which
silences it for the rest of that turn). ``bot.turns.stall`` watches; what it said and the
owner's answer are kept in the store (``bot.store.stalls``), so a tap works in any process."""

from __future__ import annotations

from enum import StrEnum

from bot.telegram.callbacks import Id
from bot.telegram.markup import CallbackData, Keyboard
from bot.telegram.texts import Texts


class StallChoice(StrEnum):
    """A watchdog message's buttons."""

    STOP = "stop"  # cancel the task's turn, as /cancel does
    WAIT = "wait"  # keep waiting: no more word about this turn


class StallAction(CallbackData, prefix="st"):
    turn_id: Id
    choice: StallChoice


def stall_keyboard(texts: Texts, loc: str, turn_id: int) -> Keyboard:
    return Keyboard.of(
        [
            [
                StallAction(turn_id=turn_id, choice=c).button(texts.get(loc, f"stall.{c}"))
                for c in StallChoice
            ]
        ]
    )
