"""/start and /help."""

from __future__ import annotations

import html

from aiogram import Router
from aiogram.filters import Command, CommandObject, CommandStart
from aiogram.filters.callback_data import CallbackData
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message

from bot.access import AccessPolicy
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

    @r.message(Command("lang"))
    async def on_lang(message: Message, command: CommandObject, access: AccessPolicy,
                      texts: Texts, locale: str) -> None:
        if command.args:
            chosen = await access.set_locale(message.from_user.id, command.args)  # type: ignore[union-attr]
            await message.answer(texts.get(chosen, "lang.set", lang=chosen))
            return
        rows = [[InlineKeyboardButton(text=loc, callback_data=LangAction(lang=loc).pack())]
                for loc in texts.locales]
        await message.answer(texts.get(locale, "lang.current", lang=locale),
                             reply_markup=InlineKeyboardMarkup(inline_keyboard=rows))

    @r.callback_query(LangAction.filter())
    async def on_lang_pressed(query: CallbackQuery, callback_data: LangAction,
                              access: AccessPolicy, texts: Texts) -> None:
        chosen = await access.set_locale(query.from_user.id, callback_data.lang)
        await query.answer()
        if query.message is not None:
            await query.message.edit_text(texts.get(chosen, "lang.set", lang=chosen))  # type: ignore[union-attr]

    return r


class LangAction(CallbackData, prefix="lg"):
    lang: str
