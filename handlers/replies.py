"""Replies continue tasks; everything else that is not a command gets a clear hint."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.types import Message

from bot.tasks.service import TaskService
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts


def router() -> Router:
    r = Router(name="replies")

    @r.message(F.reply_to_message, F.text & ~F.text.startswith("/"))
    async def on_reply(message: Message, tasks: TaskService, texts: Texts, locale: str,
                       outbox: Outbox) -> None:
        user_id = message.from_user.id  # type: ignore[union-attr]
        task = await tasks.task_for_message(
            message.chat.id, message.reply_to_message.message_id, user_id)  # type: ignore[union-attr]
        if task is None:
            await outbox.send(message.chat.id, texts.get(locale, "error.unrelated_reply"))
            return
        await tasks.follow_up(user_id, task.id, message.text or "", message.message_id)

    @r.message(F.text.startswith("/"))
    async def on_unknown_command(message: Message, texts: Texts, locale: str,
                                 outbox: Outbox) -> None:
        await outbox.send(message.chat.id, texts.get(locale, "error.unknown_command"))

    @r.edited_message()
    async def on_edited(message: Message, texts: Texts, locale: str, outbox: Outbox) -> None:
        await outbox.send(message.chat.id, texts.get(locale, "error.edited_message"))

    @r.message()
    async def on_other(message: Message, texts: Texts, locale: str, outbox: Outbox) -> None:
        await outbox.send(message.chat.id, texts.get(locale, "error.plain_text"))

    return r
