"""Hand-off between the phone and a terminal: /adopt makes a terminal session a task; the
card's 🖥 To terminal holds a task there and 📱 Take back releases it (``bot.tasks.terminal``)."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import CallbackQuery, Message

from bot.tasks.adoption import Adoption
from bot.tasks.terminal import TerminalDesk
from bot.telegram.callbacks import TaskAction, TaskButton
from bot.telegram.render import plain
from bot.telegram.reply import Reply
from bot.telegram.terminal import TakeBack
from handlers.taps import Tapped

router = Router(name="terminal")


@router.message(Command("adopt"))
async def on_adopt(
    message: Message,
    command: CommandObject,
    adoption: Adoption,
    user_id: int,
    locale: str,
    reply: Reply,
) -> None:
    """``/adopt <session id>``: the task's card is the answer."""
    typed = (command.args or "").strip()
    if not typed:
        await reply("adopt.usage")
        return
    await adoption.adopt(user_id, message.chat.id, locale, typed)


@router.callback_query(Tapped(TaskAction, F.action == TaskButton.TO_TERMINAL))
async def on_to_terminal(
    query: CallbackQuery,
    callback_data: TaskAction,
    terminal: TerminalDesk,
    user_id: int,
    reply: Reply,
) -> None:
    task = await terminal.hold(user_id, callback_data.task_id)
    await query.answer(plain(reply.text("terminal.held_toast", label=task.label)))


@router.callback_query(Tapped(TakeBack))
async def on_take_back(
    query: CallbackQuery,
    callback_data: TakeBack,
    terminal: TerminalDesk,
    user_id: int,
    reply: Reply,
) -> None:
    task = await terminal.take_back(
        user_id, callback_data.task_id, callback_data.send, callback_data.hold
    )
    await query.answer(plain(reply.text("terminal.taken_back_toast", label=task.label)))
