"""The errors router: a person always gets a clear, localized reply; nothing crashes polling."""

from __future__ import annotations

import logging

from aiogram import Router
from aiogram.types import ErrorEvent

from bot.errors import UserInputError
from bot.telegram.outbox import Outbox
from bot.telegram.render import plain, shorten
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)

router = Router(name="errors")


@router.errors()
async def on_error(event: ErrorEvent, texts: Texts, outbox: Outbox, locale: str = "en") -> None:
    exc = event.exception
    if isinstance(exc, UserInputError):
        text = texts.get(locale, exc.key, **exc.params)
    else:
        log.error("update %s failed: %r", event.update.update_id, exc, exc_info=exc)
        text = texts.get(locale, "error.internal")
    if event.update.callback_query is not None:
        await event.update.callback_query.answer(shorten(plain(text), 200), show_alert=True)
    elif (message := event.update.message) is not None:  # in its forum topic, if any
        thread_id = message.message_thread_id if message.is_topic_message else None
        await outbox.send(message.chat.id, text, thread_id=thread_id)
