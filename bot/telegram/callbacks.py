"""Typed callback payloads and the task buttons built from them (callback data <= 64 bytes)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from bot.telegram.markup import Button, CallbackData, Keyboard
from bot.telegram.texts import Texts


class TaskButton(StrEnum):
    """What a task's button does (``TaskAction.action``, in the callback data as its value;
    its caption is ``button.<value>``). A ``run_<engine>`` button (``run_on``) is the one
    action outside this set: its engine is part of it."""

    CANCEL = "cancel"
    RESUME = "resume"  # an interrupted task
    FAIL = "fail"  # an interrupted task: mark it failed
    FOLLOWUP = "followup"
    TRANSCRIPT = "transcript"
    RETRY = "retry"
    ARCHIVE = "archive"
    DIFF = "diff"  # a task's worktree
    MERGE = "merge"
    DISCARD = "discard"
    DISCARD_YES = "discard_yes"  # the discard, confirmed
    PUSH = "push"  # the worktree's branch to its remote (bot.prs)
    OPEN_PR = "open_pr"
    WAIT = "wait"  # a task that waits for its engine's usage limit: keep waiting
    TO_TERMINAL = "to_terminal"  # hand-off: hold an idle task at the terminal (bot.tasks.terminal)
    ELSEWHERE = "elsewhere"  # a task pinned to a host that is offline: unpinned (scale-out)
    FRESH = "fresh"  # a follow-up whose session's host is gone: a fresh session elsewhere


ACTIONS = tuple(TaskButton)
RUN_ON = "run_"  # "run_codex": carry a task that waits for its engine's limit over to codex
CARD_ACTIONS = [TaskButton.FOLLOWUP, TaskButton.TRANSCRIPT, TaskButton.RETRY, TaskButton.ARCHIVE]
WORKTREE_ACTIONS = [TaskButton.DIFF, TaskButton.MERGE, TaskButton.DISCARD]
PR_ACTIONS = [TaskButton.PUSH, TaskButton.OPEN_PR]  # a row of their own, under the worktree's
_BUTTON_KEYS = {a.value: f"button.{a}" for a in ACTIONS} | {
    TaskButton.FAIL.value: "button.mark_failed"
}


def run_on(engine: str) -> str:
    """The action of the button that carries a task over to ``engine``."""
    return f"{RUN_ON}{engine}"


def run_on_engine(action: str) -> str | None:
    """The engine a ``run_on`` action names (None: another action)."""
    return action[len(RUN_ON) :] if action.startswith(RUN_ON) else None


def caption(texts: Texts, locale: str, action: str) -> str:
    engine = run_on_engine(action)
    if engine is not None:
        return texts.get(locale, "button.run_on", engine=engine.capitalize())
    return texts.get(locale, _BUTTON_KEYS[action])


# a row id in callback data: anything larger (a forged 55-digit id) is not ours, and would not
# fit the database's integer
Id = Annotated[int, Field(ge=0, lt=2**53)]


class TaskAction(CallbackData, prefix="t"):
    action: str  # a TaskButton, or run_on(engine)
    task_id: Id

    @classmethod
    def buttons(
        cls,
        texts: Texts,
        locale: str,
        task_id: int,
        actions: Sequence[str],
        label: str | None = None,
    ) -> list[Button]:
        """One row of buttons; with ``label`` the first says which task the row is for."""
        captions = [caption(texts, locale, a) for a in actions]
        if label and captions:
            captions[0] = f"{label}: {captions[0]}"
        return [
            cls(action=a, task_id=task_id).button(caption)
            for a, caption in zip(actions, captions, strict=True)
        ]


def task_keyboard(
    texts: Texts, locale: str, task_id: int, actions: Sequence[str], *more_rows: Sequence[str]
) -> Keyboard:
    return Keyboard.of(
        TaskAction.buttons(texts, locale, task_id, row) for row in (actions, *more_rows) if row
    )


class SteerChoice(StrEnum):
    """A follow-up sent while its task's turn runs: into that turn now, or after it (its
    caption is ``button.steer_<value>``)."""

    STEER = "steer"
    QUEUE = "queue"


class SteerAction(CallbackData, prefix="sr"):
    choice: SteerChoice
    turn_id: Id  # the follow-up's queued turn


def steer_buttons(texts: Texts, locale: str, turn_id: int) -> list[Button]:
    """Steer now / Queue for the follow-up queued as ``turn_id``."""
    return [
        SteerAction(choice=c, turn_id=turn_id).button(texts.get(locale, f"button.steer_{c}"))
        for c in SteerChoice
    ]
