"""The owner's side of the stall watchdog: the turns whose watchdog spoke, and the answer
"Keep waiting" that silences it for the rest of that turn (``bot.turns.stall`` watches).
Kept in the memory of the process that runs the turn: a turn ends with its process."""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Spoken:
    """A watchdog's message: whose turn, which task, and the outbox row it became."""

    owner_id: int
    task_id: int
    chat_id: int
    row_id: int
    text: str


class Stalls:
    """Turn id -> its watchdog's latest message, while the turn runs here."""

    def __init__(self) -> None:
        self._spoken: dict[int, Spoken] = {}
        self._silenced: set[int] = set()

    def spoke(self, turn_id: int, spoken: Spoken) -> None:
        self._spoken[turn_id] = spoken

    def get(self, turn_id: int) -> Spoken | None:
        return self._spoken.get(turn_id)

    def silenced(self, turn_id: int) -> bool:
        return turn_id in self._silenced

    def silence(self, turn_id: int) -> Spoken | None:
        """Keep waiting: the watchdog says no more about the turn. Returns the message that
        asked (None: no such message here, or silenced already)."""
        if turn_id in self._silenced:
            return None
        spoken = self._spoken.get(turn_id)
        if spoken is not None:
            self._silenced.add(turn_id)
        return spoken

    def ended(self, turn_id: int) -> Spoken | None:
        """The turn is over: forget it; returns its last message to close, if it spoke and
        was not silenced (that one was closed by the answer)."""
        silenced = turn_id in self._silenced
        self._silenced.discard(turn_id)
        spoken = self._spoken.pop(turn_id, None)
        return None if silenced else spoken
