"""A handler's answer: localized texts to the chat its update came from, through the outbox."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.telegram.markup import Keyboard
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts


@dataclass(frozen=True, slots=True)
class Reply:
    """Built per update by the locale middleware: ``await reply("key", **params)``."""

    outbox: Outbox
    texts: Texts
    locale: str
    chat_id: int
    thread_id: int | None = None  # the forum topic the update came from: answered there

    def text(self, key: str, **params: Any) -> str:
        """The text of ``key`` in this user's locale (string params are escaped)."""
        return self.texts.get(self.locale, key, **params)

    async def __call__(self, key: str, *, markup: Keyboard | None = None, **params: Any) -> None:
        await self.send(self.text(key, **params), markup=markup)

    async def send(self, html_text: str, markup: Keyboard | None = None) -> int:
        """Returns the outbox row id (the message it becomes can be edited by it)."""
        return await self.outbox.send(
            self.chat_id, html_text, markup=markup, thread_id=self.thread_id
        )

    async def edit(self, message_id: int, html_text: str, markup: Keyboard | None = None) -> None:
        await self.outbox.edit(self.chat_id, message_id, html_text, markup)
