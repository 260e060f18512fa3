"""The owner's side of the stall watchdog: its buttons, Stop and "Keep waiting" (which
silences it for the rest of that turn). ``bot.turns.stall`` watches; what it said and the
owner's answer are kept in the store (``bot.store.stalls``), so a tap works in any process."""

from __future__ import annotations

from collections.abc import Collection
from enum import StrEnum

from bot.models import Task
from bot.store import Store
from bot.store.stalls import StallNotice, StallNoticeState
from bot.telegram.callbacks import Id
from bot.telegram.markup import CallbackData, Keyboard
from bot.telegram.notifier import Notifier
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


async def close_notice(notifier: Notifier, task: Task, notice: StallNotice) -> None:
    """The turn of a watchdog's message is over: an open message loses its buttons and says
    the turn has ended (one answered with Keep waiting was edited by that answer)."""
    if notice.state is StallNoticeState.OPEN:
        done = notifier.text(task.locale, "stall.over", label=task.label)
        await notifier.edit_row(notice.chat_id, notice.row_id, f"{notice.text}\n\n{done}")


async def close_stalls(
    store: Store, notifier: Notifier, turn_ids: Collection[int] | None = None
) -> int:
    """The runs of ``turn_ids`` died (None: every turn, at the start of the one process):
    their watchdogs' messages are forgotten and closed, so no Stop or Keep waiting stays
    under a turn nobody runs. Returns how many."""
    notices = await store.stalls.end_turns(turn_ids)
    for notice in notices:
        turn = await store.tasks.get_turn(notice.turn_id)
        task = await store.tasks.get(turn.task_id) if turn is not None else None
        if task is not None:
            await close_notice(notifier, task, notice)
    return len(notices)
