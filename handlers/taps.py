"""The filter that routes a button tap by its typed payload (``bot.telegram.markup``), handing
the parsed payload to the handler as ``callback_data``, as aiogram's ``CallbackData.filter``."""

from __future__ import annotations

from typing import Any, Literal

from aiogram.filters import Filter
from aiogram.types import CallbackQuery
from magic_filter import MagicFilter

from bot.telegram.markup import CallbackData


class Tapped(Filter):
    def __init__(self, payload: type[CallbackData], rule: MagicFilter | None = None) -> None:
        self.payload = payload
        self.rule = rule

    async def __call__(self, query: CallbackQuery) -> Literal[False] | dict[str, Any]:
        if not isinstance(query, CallbackQuery) or not query.data:
            return False
        try:
            data = self.payload.unpack(query.data)
        except (TypeError, ValueError):
            return False
        if self.rule is None or self.rule.resolve(data):
            return {"callback_data": data}
        return False
