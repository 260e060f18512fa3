"""Files sent without words: held, with one question ("What should I do with it?"); a reply
to it with words starts the task (or continues the task the file was a reply to); its Drop
button forgets them. Nothing starts on its own (``bot.telegram.held``)."""

from __future__ import annotations

from pathlib import Path

from aiogram import Router
from aiogram.types import CallbackQuery, Message

from bot.tasks.heldanswer import HeldAnswers
from bot.telegram.held import Held, HeldAction, HeldFiles, question_key, shown_names
from bot.telegram.render import plain
from bot.telegram.reply import Reply
from handlers.taps import Tapped

router = Router(name="held")


async def held_back(
    message: Message, files: list[Path], words: str, keep: HeldFiles, reply: Reply, held: Held
) -> bool:
    """Files with no ``words``: keep them (staged) for ``message``, ask what to do with them,
    and say so (True); else nothing happens here (False)."""
    if not files or words.strip():
        return False
    user_id = message.from_user.id if message.from_user else 0
    held = Held(list(files), held.command, held.text, held.task_id, held.locale)
    names = shown_names(held.files)
    keep.hold(message.chat.id, message.message_id, user_id, held)
    files.clear()  # moved: nothing left for the staging clean-up
    hours = int(keep.hold_s // 3600)
    markup = HeldFiles.keyboard(reply.text("button.drop"), message.message_id, held.task_id)
    text = reply.text("attachment.ask", names=names, hours=hours)
    row = await reply.outbox.send(reply.chat_id, text, markup=markup, reply_to=message.message_id)
    await keep.asked(message.chat.id, message.message_id, row)
    return True


async def start_held(
    message: Message,
    file_message_id: int,
    words: str,
    more: list[Path],
    held_answers: HeldAnswers,
    reply: Reply,
) -> None:
    """The reply to a question (or to the file's own message) answers the held files
    (``HeldAnswers``); the question is edited to say which task took them, or that it is held."""
    chat_id, user_id = message.chat.id, message.from_user.id if message.from_user else 0
    done = await held_answers.start(
        user_id, chat_id, file_message_id, words, message.message_id, more
    )
    if done is None:
        await reply("attachment.gone")
        return
    more.clear()  # moved with the held ones: nothing left for the staging clean-up
    if done.held.question_row is not None:
        names = shown_names(done.files)
        text = (
            reply.text("attachment.started", names=names, label=done.task.label)
            if done.task is not None
            else reply.text("attachment.held", names=names)
        )
        await reply.outbox.edit(chat_id, None, text, row_id=done.held.question_row)


async def held_for(message: Message, keep: HeldFiles, user_id: int) -> int | None:
    """The user's file message whose held files a reply (with words) answers: the one the
    bot's question names in its button, or the file's own message; None: neither."""
    replied = message.reply_to_message
    if replied is None or replied.from_user is None:
        return None
    if message.bot is not None and replied.from_user.id == message.bot.id:
        key = question_key(replied.reply_markup)
        return key.message_id if key is not None else None
    if await keep.take(message.chat.id, replied.message_id, user_id) is not None:
        return replied.message_id
    return None


@router.callback_query(Tapped(HeldAction))
async def on_drop(
    query: CallbackQuery,
    callback_data: HeldAction,
    held_files: HeldFiles,
    user_id: int,
    reply: Reply,
) -> None:
    """Drop: the held files are forgotten and the question says so."""
    chat_id = query.message.chat.id if query.message else reply.chat_id
    held = await held_files.take(chat_id, callback_data.message_id, user_id)
    if held is not None:
        held_files.forget(chat_id, callback_data.message_id)
    text = reply.text("attachment.dropped" if held else "attachment.gone")
    if query.message is not None:
        await reply.edit(query.message.message_id, text)
    await query.answer(plain(text))
