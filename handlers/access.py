"""Allow-list middleware: updates from users not in DETACH_ALLOWED_USERS cause no action, an audit
row, and at most one polite refusal per user (in a private chat)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiogram import BaseMiddleware
from aiogram.types import Chat, TelegramObject, User

from bot.telegram.access import AccessPolicy
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts

Handler = Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]]


class AllowListMiddleware(BaseMiddleware):
    def __init__(self, policy: AccessPolicy, texts: Texts, outbox: Outbox) -> None:
        self._policy = policy
        self._texts = texts
        self._outbox = outbox

    async def __call__(self, handler: Handler, event: TelegramObject, data: dict[str, Any]) -> Any:
        user: User | None = data.get("event_from_user")
        if user is None or user.is_bot:
            return None
        if not self._policy.is_allowed(user.id):
            chat: Chat | None = data.get("event_chat")
            if await self._policy.refuse(user.id) and chat is not None and chat.type == "private":
                locale = self._texts.pick(user.language_code)
                await self._outbox.send(
                    chat.id, self._texts.get(locale, "access.refused", user_id=user.id)
                )
            return None
        return await handler(event, data)
