"""aiogram's I18n middleware, picking the locale from the user's /lang choice, else their
Telegram language. Handlers get it as ``locale`` (and ``i18n``, aiogram's own context), the
sender as ``user_id`` and ``reply``, which answers in the chat the update came from."""

from __future__ import annotations

import gettext
from typing import Any

from aiogram.types import Chat, TelegramObject, User
from aiogram.utils.i18n import I18n, I18nMiddleware

from bot.telegram.access import AccessPolicy
from bot.telegram.outbox import Outbox
from bot.telegram.reply import Reply
from bot.telegram.texts import DEFAULT_LOCALE, DOMAIN, Texts


class _TextsI18n(I18n):
    """aiogram's I18n over the catalogs ``texts`` read (the same files, not read again)."""

    def __init__(self, texts: Texts) -> None:
        self._texts = texts
        super().__init__(path=texts.directory, default_locale=DEFAULT_LOCALE, domain=DOMAIN)

    def find_locales(self) -> dict[str, gettext.GNUTranslations]:
        return self._texts.catalogs


class LocaleMiddleware(I18nMiddleware):
    def __init__(self, policy: AccessPolicy, texts: Texts, outbox: Outbox) -> None:
        super().__init__(_TextsI18n(texts))
        self._policy = policy
        self._texts = texts
        self._outbox = outbox

    async def get_locale(self, event: TelegramObject, data: dict[str, Any]) -> str:
        user: User | None = data.get("event_from_user")
        locale = (
            await self._policy.locale(user.id, user.language_code)
            if user
            else self.i18n.default_locale
        )
        data["locale"] = locale
        if user is not None:
            data["user_id"] = user.id
        chat: Chat | None = data.get("event_chat")
        chat_id = chat.id if chat is not None else user.id if user is not None else None
        if chat_id is not None:
            thread_id = data.get("event_thread_id")  # a forum topic's message: answered there
            data["reply"] = Reply(self._outbox, self._texts, locale, chat_id, thread_id)
        return locale
