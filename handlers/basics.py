"""/start and /help."""

from __future__ import annotations

import html

from aiogram import Router
from aiogram.filters import Command, CommandStart
from aiogram.types import Message

from bot.texts import Texts


def router() -> Router:
    r = Router(name="basics")

    @r.message(CommandStart())
    async def on_start(message: Message, texts: Texts, locale: str) -> None:
        await message.answer(texts.get(locale, "start.greeting"))

    @r.message(Command("help"))
    async def on_help(message: Message, texts: Texts, locale: str) -> None:
        await message.answer(texts.get(locale, "start.help"))

    @r.message(Command("status"))
    async def on_status(message: Message, texts: Texts, locale: str,
                        engine_status: list[str]) -> None:
        lines = "\n".join(f"• {line}" for line in engine_status)
        await message.answer(texts.get(locale, "start.status") + "\n" + html.escape(lines))

    return r
