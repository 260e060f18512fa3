"""Allow-list: updates from users not in DETACH_ALLOWED_USERS cause no action, an audit row, and
at most one polite refusal per user."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware
from aiogram.types import Chat, TelegramObject, User

from bot.store import Store
from bot.texts import Texts

log = logging.getLogger(__name__)
Handler = Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]]


class AllowListMiddleware(BaseMiddleware):
    def __init__(self, allowed: frozenset[int], store: Store, texts: Texts) -> None:
        self._allowed = allowed
        self._store = store
        self._texts = texts
        self._refused: set[int] = set()

    async def __call__(self, handler: Handler, event: TelegramObject, data: dict[str, Any]) -> Any:
        user: User | None = data.get("event_from_user")
        if user is None or user.is_bot:
            return None
        locale = self._texts.pick(user.language_code)
        if user.id not in self._allowed:
            await self._refuse(user, data.get("event_chat"), locale, data["bot"])
            return None
        data["locale"] = locale
        return await handler(event, data)

    async def _refuse(self, user: User, chat: Chat | None, locale: str, bot: Any) -> None:
        log.info("refused an update from user %s", user.id)
        await self._store.audit.record("access_refused", user.id)
        if user.id in self._refused or chat is None or chat.type != "private":
            return
        self._refused.add(user.id)
        if await self._store.audit.count("refusal_sent", user.id):
            return
        await self._store.audit.record("refusal_sent", user.id)
        await bot.send_message(chat.id, self._texts.get(locale, "access.refused", user_id=user.id))
