"""Replies continue tasks; a plain message in a private chat starts one (``DETACH_PLAIN_TEXT``);
everything else that is not a command gets a clear hint."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.dispatcher.event.bases import SkipHandler
from aiogram.types import Message

from bot.models import Task, TaskKind
from bot.tasks.followup import FollowUp
from bot.tasks.heldanswer import PLAIN
from bot.tasks.requests import ChatRequest
from bot.tasks.usecases import UseCases
from bot.telegram.attachments import staged
from bot.telegram.held import Held
from bot.telegram.reply import Reply
from handlers.held import held_back, held_for, start_held

LINK_WAIT_S = 3.0  # a reply to the bot's message that is not linked yet waits this long

router = Router(name="replies")
WITH_CONTENT = (F.text & ~F.text.startswith("/")) | F.document | F.photo


def in_topic(message: Message) -> bool:
    """A message in a forum topic that answers nothing of its own (Telegram makes a topic's
    first message the one a message in it "replies" to)."""
    replied = message.reply_to_message
    at_root = replied is None or replied.message_id == message.message_thread_id
    return bool(message.is_topic_message) and at_root


@router.message(F.func(in_topic), WITH_CONTENT)
async def on_topic_message(message: Message, uses: UseCases, user_id: int, reply: Reply) -> None:
    """Any message in a task's topic continues the task, no reply needed; in a topic no task
    opened it is handled as anywhere else."""
    assert message.message_thread_id is not None  # the filter says so
    task = await uses.lookup.task_in_topic(message.chat.id, message.message_thread_id, user_id)
    if task is None:
        raise SkipHandler
    await follow(message, task, message.text or message.caption or "", uses, user_id, reply)


@router.message(F.reply_to_message, ~F.func(in_topic), WITH_CONTENT)
async def on_reply(
    message: Message, uses: UseCases, user_id: int, locale: str, reply: Reply
) -> None:
    """A reply continues its task; a file in it goes into the task's directory (a file
    without words is held and asked about). A reply to that question starts the task. A
    message at a topic's root is no reply (Telegram says it replies to the topic's first
    message): in a topic no task opened it goes on as a plain message."""
    replied = message.reply_to_message
    assert replied is not None  # the filter says so
    own = replied.from_user is not None and replied.from_user.is_bot
    text = message.text or message.caption or ""
    asked_about = await held_for(message, uses.held_files, user_id) if text.strip() else None
    if asked_about is not None:
        async with staged(message, uses.create) as files:
            await start_held(message, asked_about, text, files, uses.held_answers, reply)
        return
    step = uses.preflight
    if own and step and await step.answered(user_id, message.chat.id, replied.message_id, text):
        return  # the answer to a preflight's question: it starts its task
    task = await uses.lookup.task_for_message(
        message.chat.id, replied.message_id, user_id, wait_s=LINK_WAIT_S if own else 0.0
    )
    if task is None:
        await reply("error.unrelated_reply")
        return
    await follow(message, task, text, uses, user_id, reply)


async def follow(
    message: Message, task: Task, text: str, uses: UseCases, user_id: int, reply: Reply
) -> None:
    """``message`` continues ``task``; a file without words is held and asked about."""
    async with staged(message, uses.create) as files:
        asked = Held(files, PLAIN, "", task.id, reply.locale)
        if await held_back(message, files, text, uses.held_files, reply, asked):
            return
        asked_to = FollowUp(
            user_id=user_id,
            task_id=task.id,
            prompt=text,
            reply_to=message.message_id,
            attachments=files,
        )
        await uses.follow_up.follow_up(asked_to)


@router.message(F.text.startswith("/"))
async def on_unknown_command(message: Message, reply: Reply) -> None:
    await reply("error.unknown_command")


@router.edited_message()
async def on_edited(message: Message, reply: Reply) -> None:
    await reply("error.edited_message")


@router.message(F.chat.type == "private", F.text | F.document | F.photo)
async def on_plain_text(
    message: Message, uses: UseCases, user_id: int, locale: str, reply: Reply
) -> None:
    """Text (or a file with its caption) that is neither a command nor a reply: a task
    like /detach (all of it is the goal), or the hint when the bot answers with help."""
    if not uses.create.plain_text_tasks:
        await reply("error.plain_text")
        return
    async with staged(message, uses.create) as files:
        asked = Held(files, PLAIN, "", None, locale)
        if await held_back(message, files, message.caption or "", uses.held_files, reply, asked):
            return
        await uses.create.from_chat(
            ChatRequest(
                user_id,
                message.chat.id,
                TaskKind.DETACH,
                message.text or message.caption or "",
                locale,
                "detach",
                reply_to=message.message_id,
                with_options=False,
                attachments=files,
            )
        )


@router.message()
async def on_other(message: Message, reply: Reply) -> None:
    await reply("error.plain_text")
