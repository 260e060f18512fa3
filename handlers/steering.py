"""Steer now / Queue on a follow-up sent while its task's turn runs."""

from __future__ import annotations

from aiogram import Router
from aiogram.types import CallbackQuery

from bot.tasks.steering import SteerDesk
from bot.telegram.callbacks import SteerAction
from bot.telegram.render import plain
from bot.telegram.reply import Reply
from handlers.taps import Tapped

router = Router(name="steering")


@router.callback_query(Tapped(SteerAction))
async def on_steer_choice(
    query: CallbackQuery,
    callback_data: SteerAction,
    steering: SteerDesk | None,
    user_id: int,
    reply: Reply,
) -> None:
    if steering is None:
        await query.answer(plain(reply.text("toast.steer_gone")))
        return
    answer = await steering.choose(user_id, callback_data.turn_id, callback_data.choice)
    await query.answer(plain(reply.text(f"toast.steer_{answer}")))
