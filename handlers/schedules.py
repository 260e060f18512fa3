"""/every, /at, /tz and /schedules (with Pause / Resume and Delete buttons)."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.filters import Command, CommandObject
from aiogram.filters.callback_data import CallbackData
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message

from bot.schedules.desk import Listed, ScheduleDesk
from bot.telegram.callbacks import Id
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts

ACTIONS = ("pause", "resume", "delete")


class ScheduleAction(CallbackData, prefix="sc"):
    action: str
    schedule_id: Id


def _line(desk: ScheduleDesk, texts: Texts, locale: str, listed: Listed) -> str:
    key = "schedule.line_paused" if listed.schedule.state == "paused" else "schedule.line"
    return texts.get(locale, key, **desk.describe(listed))


def _buttons(texts: Texts, locale: str, listed: Listed) -> list[InlineKeyboardButton]:
    s = listed.schedule
    toggle = "resume" if s.state == "paused" else "pause"
    return [InlineKeyboardButton(text=f"S{s.id}: " + texts.get(locale, f"button.{action}"),
                                 callback_data=ScheduleAction(action=action, schedule_id=s.id)
                                 .pack()) for action in (toggle, "delete")]


async def _view(desk: ScheduleDesk, texts: Texts, locale: str,
                user_id: int) -> tuple[str, InlineKeyboardMarkup | None]:
    listed = await desk.list(user_id)
    if not listed:
        return texts.get(locale, "schedule.none", tz=await desk.tz(user_id)), None
    lines = [texts.get(locale, "schedule.header", tz=await desk.tz(user_id))]
    lines += [_line(desk, texts, locale, item) for item in listed]
    rows = [_buttons(texts, locale, item) for item in listed[:20]]
    return "\n".join(lines), InlineKeyboardMarkup(inline_keyboard=rows)


def router() -> Router:
    r = Router(name="schedules")

    @r.message(Command("every", "at"))
    async def on_schedule(message: Message, command: CommandObject, schedules: ScheduleDesk,
                          texts: Texts, locale: str, outbox: Outbox) -> None:
        name = command.command.lower()
        if not (command.args or "").strip():
            await outbox.send(message.chat.id, texts.get(locale, f"schedule.usage_{name}"))
            return
        listed = await schedules.add(message.from_user.id, message.chat.id,  # type: ignore[union-attr]
                                     locale, name, command.args or "")
        await outbox.send(message.chat.id, texts.get(locale, "schedule.added",
                                                     **schedules.describe(listed)),
                          markup=InlineKeyboardMarkup(inline_keyboard=[
                              _buttons(texts, locale, listed)]))

    @r.message(Command("tz"))
    async def on_tz(message: Message, command: CommandObject, schedules: ScheduleDesk,
                    texts: Texts, locale: str, outbox: Outbox) -> None:
        user_id = message.from_user.id  # type: ignore[union-attr]
        if (command.args or "").strip():
            tz = await schedules.set_tz(user_id, command.args or "")
            await outbox.send(message.chat.id, texts.get(locale, "schedule.tz_set", tz=tz))
            return
        await outbox.send(message.chat.id, texts.get(locale, "schedule.tz_current",
                                                     tz=await schedules.tz(user_id)))

    @r.message(Command("schedules"))
    async def on_list(message: Message, schedules: ScheduleDesk, texts: Texts, locale: str,
                      outbox: Outbox) -> None:
        text, markup = await _view(schedules, texts, locale,
                                   message.from_user.id)  # type: ignore[union-attr]
        await outbox.send(message.chat.id, text, markup=markup)

    @r.callback_query(ScheduleAction.filter(F.action.in_(ACTIONS)))
    async def on_pressed(query: CallbackQuery, callback_data: ScheduleAction,
                         schedules: ScheduleDesk, texts: Texts, locale: str,
                         outbox: Outbox) -> None:
        user_id = query.from_user.id
        action = {"pause": schedules.pause, "resume": schedules.resume,
                  "delete": schedules.delete}[callback_data.action]
        schedule = await action(user_id, callback_data.schedule_id)
        await query.answer(texts.get(locale, f"schedule.{callback_data.action}d",
                                     ref=f"S{schedule.id}"))
        if query.message is not None:
            text, markup = await _view(schedules, texts, locale, user_id)
            await outbox.edit(query.message.chat.id, query.message.message_id, text, markup)

    return r
