"""Replies continue tasks; everything else that is not a command gets a clear hint."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.types import Message

from bot.tasks.service import TaskService
from bot.telegram.reply import Reply


def router() -> Router:
    r = Router(name="replies")

    @r.message(F.reply_to_message, F.text & ~F.text.startswith("/"))
    async def on_reply(message: Message, tasks: TaskService, user_id: int, reply: Reply) -> None:
        replied = message.reply_to_message
        assert replied is not None  # the filter says so
        task = await tasks.task_for_message(message.chat.id, replied.message_id, user_id)
        if task is None:
            await reply("error.unrelated_reply")
            return
        await tasks.follow_up(user_id, task.id, message.text or "", message.message_id)

    @r.message(F.text.startswith("/"))
    async def on_unknown_command(message: Message, reply: Reply) -> None:
        await reply("error.unknown_command")

    @r.edited_message()
    async def on_edited(message: Message, reply: Reply) -> None:
        await reply("error.edited_message")

    @r.message()
    async def on_other(message: Message, reply: Reply) -> None:
        await reply("error.plain_text")

    return r
