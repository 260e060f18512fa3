"""The errors router: a person always gets a clear, localized reply; nothing crashes polling."""

from __future__ import annotations

import logging

from aiogram import Router
from aiogram.types import ErrorEvent, Message

from bot.errors import TaskHeld, UserInputError
from bot.telegram.markup import Keyboard
from bot.telegram.outbox import Outbox
from bot.telegram.render import plain, shorten
from bot.telegram.terminal import take_back_keyboard
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
    if isinstance(exc, TaskHeld):  # one line, with the button that ends the hold
        await _held(
            event,
            text,
            take_back_keyboard(texts, locale, exc.task_id, exc.parked, exc.hold),
            outbox,
        )
    elif event.update.callback_query is not None:
        await event.update.callback_query.answer(shorten(plain(text), 200), show_alert=True)
    elif (message := event.update.message) is not None:  # in its forum topic, if any
        thread_id = message.message_thread_id if message.is_topic_message else None
        await outbox.send(message.chat.id, text, thread_id=thread_id)


async def _held(event: ErrorEvent, text: str, markup: Keyboard, outbox: Outbox) -> None:
    """A turn refused because its task is at the terminal: the line and Take back go to the
    chat (a tap's alert could not carry the button)."""
    query, message = event.update.callback_query, event.update.message
    source = message if message is not None else query.message if query else None
    if source is not None:  # in the forum topic the refused message or tapped button is in
        thread_id = source.message_thread_id if isinstance(source, Message) else None
        in_topic = isinstance(source, Message) and bool(source.is_topic_message)
        await outbox.send(
            source.chat.id, text, markup=markup, thread_id=thread_id if in_topic else None
        )
    if query is not None:
        await query.answer(shorten(plain(text), 200))
