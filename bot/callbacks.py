"""Typed callback payloads and the task buttons built from them (callback data <= 64 bytes)."""

from __future__ import annotations

from aiogram.filters.callback_data import CallbackData
from aiogram.types import InlineKeyboardButton, InlineKeyboardMarkup

from bot.texts import Texts

ACTIONS = ("cancel", "resume", "fail")
_BUTTON_KEYS = {"cancel": "button.cancel", "resume": "button.resume", "fail": "button.mark_failed"}


class TaskAction(CallbackData, prefix="t"):
    action: str
    task_id: int

    @classmethod
    def buttons(cls, texts: Texts, locale: str, task_id: int, actions: list[str],
                label: str | None = None) -> list[InlineKeyboardButton]:
        prefix = f"{label}: " if label else ""
        return [InlineKeyboardButton(
            text=prefix + texts.get(locale, _BUTTON_KEYS[a]) if i == 0 else
            texts.get(locale, _BUTTON_KEYS[a]),
            callback_data=cls(action=a, task_id=task_id).pack()) for i, a in enumerate(actions)]


def task_keyboard(texts: Texts, locale: str, task_id: int, actions: list[str]) -> InlineKeyboardMarkup:
    return InlineKeyboardMarkup(inline_keyboard=[TaskAction.buttons(texts, locale, task_id, actions)])
