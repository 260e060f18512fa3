"""A worktree task's ⬆️ Push and Open PR buttons, and ``/prs``: the open ones (bot.prs)."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.filters import Command
from aiogram.types import CallbackQuery, Message

from bot.prs.desk import PullRequests
from bot.telegram.callbacks import TaskAction, TaskButton
from bot.telegram.reply import Reply
from handlers.taps import Tapped

router = Router(name="prs")


@router.callback_query(Tapped(TaskAction, F.action.in_({TaskButton.PUSH, TaskButton.OPEN_PR})))
async def on_pr_action(
    query: CallbackQuery,
    callback_data: TaskAction,
    prs: PullRequests,
    user_id: int,
    reply: Reply,
) -> None:
    if callback_data.action == TaskButton.PUSH:
        done = await prs.push(user_id, callback_data.task_id)
    else:
        done = await prs.open(user_id, callback_data.task_id)
    refused = "" if done else "_refused"
    await query.answer(reply.text(f"toast.{callback_data.action}{refused}"))


@router.message(Command("prs"))
async def on_prs(message: Message, prs: PullRequests, user_id: int, reply: Reply) -> None:
    await reply.send(await prs.listing(user_id, reply.locale))
