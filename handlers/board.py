"""/board: a one-time sign-in link to the board (and, with an https:// DETACH_PUBLIC_URL, a
button that opens it as a Telegram Mini App). Only in a private chat: a link in a group would
sign in whoever opens it first; a board that could not listen on its port says so."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiogram import Router
from aiogram.filters import Command
from aiogram.types import Message

from bot.telegram.markup import Button, Keyboard
from bot.telegram.reply import Reply

if TYPE_CHECKING:
    from bot.board.server import Board

router = Router(name="board")


@router.message(Command("board"))
async def on_board(
    message: Message, reply: Reply, user_id: int, board: Board | None = None
) -> None:
    if board is None:
        await reply("board.off")
        return
    if not board.listening:  # its port was taken: the log says which
        await reply("board.unavailable")
        return
    if message.chat.type != "private":
        await reply("board.private_only")
        return
    link = board.link(user_id)
    markup = None
    if board.mini_app:
        markup = Keyboard.of([[Button(reply.text("board.open"), "", web_app=board.url)]])
    await reply.send(reply.text("board.link", link=link), markup=markup)
