"""Typed callback payloads and the task buttons built from them (callback data <= 64 bytes)."""

from __future__ import annotations

from typing import Annotated

from aiogram.filters.callback_data import CallbackData
from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup
from pydantic import Field

from bot.telegram.texts import Texts

ACTIONS = (
    "cancel",
    "resume",
    "fail",
    "followup",
    "transcript",
    "retry",
    "archive",
    "diff",
    "merge",
    "discard",
    "discard_yes",
)
CARD_ACTIONS = ["followup", "transcript", "retry", "archive"]
WORKTREE_ACTIONS = ["diff", "merge", "discard"]
_BUTTON_KEYS = {a: f"button.{a}" for a in ACTIONS} | {"fail": "button.mark_failed"}
# a row id in callback data: anything larger (a forged 55-digit id) is not ours, and would not
# fit the database's integer
Id = Annotated[int, Field(ge=0, lt=2**53)]


class TaskAction(CallbackData, prefix="t"):
    action: str
    task_id: Id

    @classmethod
    def buttons(
        cls, texts: Texts, locale: str, task_id: int, actions: list[str], label: str | None = None
    ) -> list[InlineKeyboardButton]:
        """One row of buttons; with ``label`` the first says which task the row is for."""
        captions = [texts.get(locale, _BUTTON_KEYS[a]) for a in actions]
        if label and captions:
            captions[0] = f"{label}: {captions[0]}"
        return [
            InlineKeyboardButton(text=caption, callback_data=cls(action=a, task_id=task_id).pack())
            for a, caption in zip(actions, captions, strict=True)
        ]


def task_keyboard(
    texts: Texts, locale: str, task_id: int, actions: list[str], *more_rows: list[str]
) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(
        inline_keyboard=[
            TaskAction.buttons(texts, locale, task_id, row) for row in (actions, *more_rows) if row
        ]
    )
