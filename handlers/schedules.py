"""/every, /at, /tz and /schedules (with Pause / Resume and Delete buttons)."""

from __future__ import annotations

from enum import StrEnum

from aiogram import F, Router
from aiogram.filters import Command, CommandObject
from aiogram.types import CallbackQuery, Message

from bot.models import ScheduleState
from bot.schedules.desk import Listed, ScheduleDesk
from bot.telegram.callbacks import Id
from bot.telegram.markup import Button, CallbackData, Keyboard
from bot.telegram.reply import Reply
from handlers.taps import Tapped


class ScheduleButton(StrEnum):
    """What a schedule's button does (in the callback data as its value; its caption is
    ``button.<value>``)."""

    PAUSE = "pause"
    RESUME = "resume"
    DELETE = "delete"


ACTIONS = tuple(ScheduleButton)

router = Router(name="schedules")


class ScheduleAction(CallbackData, prefix="sc"):
    action: ScheduleButton
    schedule_id: Id


def _line(desk: ScheduleDesk, reply: Reply, listed: Listed) -> str:
    key = (
        "schedule.line_paused" if listed.schedule.state == ScheduleState.PAUSED else "schedule.line"
    )
    return reply.text(key, **desk.describe(listed, reply.locale))


def _buttons(reply: Reply, listed: Listed) -> list[Button]:
    s = listed.schedule
    toggle = ScheduleButton.RESUME if s.state == ScheduleState.PAUSED else ScheduleButton.PAUSE
    return [
        Button(
            text=f"S{s.id}: " + reply.text(f"button.{action}"),
            callback_data=ScheduleAction(action=action, schedule_id=s.id).pack(),
        )
        for action in (toggle, ScheduleButton.DELETE)
    ]


async def _view(desk: ScheduleDesk, reply: Reply, user_id: int) -> tuple[str, Keyboard | None]:
    listed = await desk.list(user_id)
    if not listed:
        return reply.text("schedule.none", tz=await desk.tz(user_id)), None
    lines = [reply.text("schedule.header", tz=await desk.tz(user_id))]
    lines += [_line(desk, reply, item) for item in listed]
    rows = [_buttons(reply, item) for item in listed[:20]]
    return "\n".join(lines), Keyboard.of(rows)


@router.message(Command("every", "at"))
async def on_schedule(
    message: Message,
    command: CommandObject,
    schedules: ScheduleDesk,
    user_id: int,
    reply: Reply,
) -> None:
    name = command.command.lower()
    if not (command.args or "").strip():
        await reply(f"schedule.usage_{name}")
        return
    listed = await schedules.add(user_id, message.chat.id, reply.locale, name, command.args or "")
    await reply(
        "schedule.added",
        **schedules.describe(listed, reply.locale),
        markup=Keyboard.of([_buttons(reply, listed)]),
    )


@router.message(Command("tz"))
async def on_tz(
    message: Message,
    command: CommandObject,
    schedules: ScheduleDesk,
    user_id: int,
    reply: Reply,
) -> None:
    if (command.args or "").strip():
        await reply("schedule.tz_set", tz=await schedules.set_tz(user_id, command.args or ""))
        return
    await reply("schedule.tz_current", tz=await schedules.tz(user_id))


@router.message(Command("schedules"))
async def on_list(message: Message, schedules: ScheduleDesk, user_id: int, reply: Reply) -> None:
    text, markup = await _view(schedules, reply, user_id)
    await reply.send(text, markup=markup)


@router.callback_query(Tapped(ScheduleAction, F.action.in_(ACTIONS)))
async def on_pressed(
    query: CallbackQuery,
    callback_data: ScheduleAction,
    schedules: ScheduleDesk,
    user_id: int,
    reply: Reply,
) -> None:
    action = {
        ScheduleButton.PAUSE: schedules.pause,
        ScheduleButton.RESUME: schedules.resume,
        ScheduleButton.DELETE: schedules.delete,
    }[callback_data.action]
    schedule = await action(user_id, callback_data.schedule_id)
    await query.answer(reply.text(f"schedule.{callback_data.action}d", ref=f"S{schedule.id}"))
    if query.message is not None:
        text, markup = await _view(schedules, reply, user_id)
        await reply.edit(query.message.message_id, text, markup)
