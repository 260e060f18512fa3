"""/start and /help."""

from __future__ import annotations

import html

from aiogram import Router
from aiogram.filters import Command, CommandObject, CommandStart
from aiogram.filters.callback_data import CallbackData
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message

from bot.telegram.access import AccessPolicy
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts


def router() -> Router:
    r = Router(name="basics")

    @r.message(CommandStart())
    async def on_start(message: Message, texts: Texts, locale: str, outbox: Outbox) -> None:
        await outbox.send(message.chat.id, texts.get(locale, "start.greeting"))

    @r.message(Command("help"))
    async def on_help(message: Message, texts: Texts, locale: str, outbox: Outbox) -> None:
        await outbox.send(message.chat.id, texts.get(locale, "start.help"))

    @r.message(Command("status"))
    async def on_status(message: Message, texts: Texts, locale: str,
                        engine_status: list[str], outbox: Outbox) -> None:
        lines = "\n".join(f"• {line}" for line in engine_status)
        await outbox.send(message.chat.id,
                          texts.get(locale, "start.status") + "\n" + html.escape(lines))

    @r.message(Command("lang"))
    async def on_lang(message: Message, command: CommandObject, access: AccessPolicy,
                      texts: Texts, locale: str, outbox: Outbox) -> None:
        if command.args:
            chosen = await access.set_locale(message.from_user.id, command.args)  # type: ignore[union-attr]
            await outbox.send(message.chat.id, texts.get(chosen, "lang.set", lang=chosen))
            return
        rows = [[InlineKeyboardButton(text=loc, callback_data=LangAction(lang=loc).pack())]
                for loc in texts.locales]
        await outbox.send(message.chat.id, texts.get(locale, "lang.current", lang=locale),
                             markup=InlineKeyboardMarkup(inline_keyboard=rows))

    @r.callback_query(LangAction.filter())
    async def on_lang_pressed(query: CallbackQuery, callback_data: LangAction,
                              access: AccessPolicy, texts: Texts, outbox: Outbox) -> None:
        chosen = await access.set_locale(query.from_user.id, callback_data.lang)
        await query.answer()
        if query.message is not None:
            await outbox.edit(query.message.chat.id, query.message.message_id,
                              texts.get(chosen, "lang.set", lang=chosen))

    return r


class LangAction(CallbackData, prefix="lg"):
    lang: str
