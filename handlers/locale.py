"""aiogram's I18n middleware, picking the locale from the user's /lang choice, else their
Telegram language; handlers get it as ``locale`` (and ``i18n``, aiogram's own context)."""

from __future__ import annotations

from typing import Any

from aiogram.types import TelegramObject, User
from aiogram.utils.i18n import I18nMiddleware

from bot.telegram.access import AccessPolicy
from bot.telegram.texts import Texts


class LocaleMiddleware(I18nMiddleware):
    def __init__(self, policy: AccessPolicy, texts: Texts) -> None:
        super().__init__(texts.i18n)
        self._policy = policy

    async def get_locale(self, event: TelegramObject, data: dict[str, Any]) -> str:
        user: User | None = data.get("event_from_user")
        locale = await self._policy.locale(user.id, user.language_code) if user else \
            self.i18n.default_locale
        data["locale"] = locale
        return locale
