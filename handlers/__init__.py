"""aiogram routers, one per feature, assembled into a fresh Dispatcher by ``build_dispatcher``."""

from __future__ import annotations

from collections.abc import Iterable

from aiogram import Bot, Dispatcher
from aiogram.types import BotCommand

from bot.notifier import Notifier
from bot.service import TaskService
from bot.store import Store
from bot.texts import DEFAULT_LOCALE, Texts
from handlers import basics, buttons, errors, replies, tasks
from handlers.access import AllowListMiddleware

COMMANDS = ("detach", "claude", "tasks", "result", "cancel", "archive", "help")


def build_dispatcher(service: TaskService, notifier: Notifier, store: Store, texts: Texts,
                     allowed_users: Iterable[int]) -> Dispatcher:
    dp = Dispatcher(tasks=service, notifier=notifier, texts=texts)
    dp.update.outer_middleware(AllowListMiddleware(frozenset(allowed_users), store, texts))
    dp.include_routers(basics.router(), tasks.router(), buttons.router(), replies.router(),
                       errors.router())

    async def set_commands(bot: Bot) -> None:
        await bot.set_my_commands([BotCommand(command=c, description=texts.get(
            DEFAULT_LOCALE, f"commands.{c}")) for c in COMMANDS])

    dp.startup.register(set_commands)
    return dp
