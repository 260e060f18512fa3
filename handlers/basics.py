"""/start, /help, /status, /notify and /lang."""

from __future__ import annotations

from aiogram import Router
from aiogram.filters import Command, CommandObject, CommandStart
from aiogram.types import CallbackQuery, Message

from bot.fleet.status import FleetStatus, RunnerLine
from bot.models import Phrase
from bot.tasks.chat import ChatSettings
from bot.telegram.access import AccessPolicy
from bot.telegram.markup import Button, CallbackData, Keyboard
from bot.telegram.render import duration
from bot.telegram.reply import Reply
from bot.telegram.texts import Texts
from handlers.taps import Tapped

router = Router(name="basics")


class LangAction(CallbackData, prefix="lg"):
    lang: str


@router.message(CommandStart())
async def on_start(message: Message, reply: Reply) -> None:
    await reply("start.greeting")


@router.message(Command("help"))
async def on_help(message: Message, reply: Reply) -> None:
    await reply("start.help")


@router.message(Command("status"))
async def on_status(
    message: Message,
    reply: Reply,
    engine_status: list[Phrase],
    chat: ChatSettings,
    fleet: FleetStatus,
    user_id: int,
) -> None:
    await reply.send(await _status(reply, engine_status, chat, fleet, user_id))


@router.message(Command("notify"))
async def on_notify(
    message: Message, command: CommandObject, chat: ChatSettings, reply: Reply
) -> None:
    """/notify all|done|quiet: which task messages make the phone buzz."""
    typed = (command.args or "").strip()
    if typed:
        policy = await chat.set_notify_policy(message.chat.id, typed)
    else:
        policy = await chat.notify_policy(message.chat.id)
    await reply("notify.current", policy=policy.value)


@router.message(Command("lang"))
async def on_lang(
    message: Message,
    command: CommandObject,
    access: AccessPolicy,
    texts: Texts,
    user_id: int,
    reply: Reply,
) -> None:
    if command.args:
        chosen = await access.set_locale(user_id, command.args)
        await reply.send(texts.get(chosen, "lang.set", lang=_name(texts, chosen)))
        return
    rows = [
        [Button(text=_name(texts, loc), callback_data=LangAction(lang=loc).pack())]
        for loc in texts.locales
    ]
    await reply("lang.current", lang=_name(texts, reply.locale), markup=Keyboard.of(rows))


@router.callback_query(Tapped(LangAction))
async def on_lang_pressed(
    query: CallbackQuery,
    callback_data: LangAction,
    access: AccessPolicy,
    texts: Texts,
    user_id: int,
    reply: Reply,
) -> None:
    chosen = await access.set_locale(user_id, callback_data.lang)
    await query.answer()
    if query.message is not None:
        text = texts.get(chosen, "lang.set", lang=_name(texts, chosen))
        await reply.edit(query.message.message_id, text)


def _name(texts: Texts, locale: str) -> str:
    """A language as its speakers write it: English, Русский."""
    return texts.get(locale, "lang.name")


async def _status(
    reply: Reply, engine_status: list[Phrase], chat: ChatSettings, fleet: FleetStatus, user_id: int
) -> str:
    """The engines here and their limits; on a shared database, the runners."""
    lines = "\n".join(f"• {reply.texts.say(reply.locale, line)}" for line in engine_status)
    limits = [
        reply.text("start.status_limited", engine=engine, resets=resets)
        for engine, resets in await chat.engine_limits(user_id)
    ]
    text = [reply.text("start.status"), lines, *limits]
    runners = await fleet.runners()
    if runners:
        text += ["", reply.text("status.runners"), *(_runner(reply, r) for r in runners)]
    return "\n".join(text)


def _runner(reply: Reply, line: RunnerLine) -> str:
    """``🟢 w1 on host-a · 2s ago · 3 running · claude, codex``."""
    runner = line.runner
    return reply.text(
        "status.runner_lost" if line.lost else "status.runner",
        name=runner.name,
        host=runner.host,
        seen=duration(line.seen_s),
        running=runner.running,
        engines=", ".join(runner.engines) or "–",
    )
