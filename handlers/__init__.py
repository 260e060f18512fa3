"""aiogram routers, one per feature, assembled into a fresh Dispatcher by ``build_dispatcher``."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiogram import BaseMiddleware, Bot, Dispatcher
from aiogram.types import BotCommand, TelegramObject

from bot.approvals.answers import ApprovalAnswers
from bot.fleet.status import FleetStatus
from bot.schedules.desk import ScheduleDesk
from bot.tasks.card import TaskCard
from bot.tasks.handover import Handover
from bot.tasks.service import TaskService
from bot.telegram.access import AccessPolicy
from bot.telegram.outbox import Outbox
from bot.telegram.texts import DEFAULT_LOCALE, Texts
from bot.worktrees.card import WorktreeCard
from handlers import approvals, basics, buttons, errors, held, money, replies, schedules, tasks
from handlers.access import AllowListMiddleware
from handlers.locale import LocaleMiddleware

# the menu: /detach, then one command per engine, then these
COMMANDS = (
    "tasks",
    "result",
    "export",
    "cancel",
    "archive",
    "grants",
    "every",
    "at",
    "schedules",
    "tz",
    "model",
    "spend",
    "cd",
    "notify",
    "status",
    "lang",
    "help",
)


@dataclass(frozen=True, slots=True)
class Services:
    """What handlers are given by name (aiogram's workflow data: a handler's parameter named
    ``tasks`` receives the task service, and so on)."""

    tasks: TaskService
    card: TaskCard
    worktree_card: WorktreeCard
    handover: Handover
    answers: ApprovalAnswers
    access: AccessPolicy
    texts: Texts
    outbox: Outbox
    schedules: ScheduleDesk
    engine_status: list[str]  # filled in once the engines' probes answered
    fleet: FleetStatus


def build_dispatcher(
    services: Services,
    *,
    engines: Sequence[str],
    engines_ready: Callable[[], Awaitable[object]],
    make: Callable[..., Dispatcher] = Dispatcher,
) -> Dispatcher:
    """Handlers reply through the outbox (paced, durable, in order with task messages);
    ``engines`` name the task commands besides /detach (and their menu entries, from the
    catalogs' ``commands.<engine>``); an update is handled once ``engines_ready`` (the
    engines' start-up probes, which run while polling starts); ``make`` builds the Dispatcher
    itself (the bot's keeps a journal of updates)."""
    dp = make(**{f: getattr(services, f) for f in Services.__dataclass_fields__})
    access, texts, outbox = services.access, services.texts, services.outbox
    dp.update.outer_middleware(WaitFor(engines_ready))
    dp.update.outer_middleware(AllowListMiddleware(access, texts, outbox))
    dp.update.outer_middleware(LocaleMiddleware(access, texts, outbox))
    dp.include_routers(
        basics.router(),
        tasks.router(engines),
        approvals.router(),
        money.router(),
        schedules.router(),
        held.router(),
        buttons.router(),
        replies.router(),
        errors.router(),
    )

    async def set_commands(bot: Bot) -> None:
        """The command menu in every language we have; English is also the default."""
        for locale in texts.locales:
            menu = [
                BotCommand(command=c, description=texts.get(locale, f"commands.{c}"))
                for c in ("detach", *engines, *COMMANDS)
            ]
            await bot.set_my_commands(menu, language_code=locale)
            if locale == DEFAULT_LOCALE:
                await bot.set_my_commands(menu)

    menu_setting: set[asyncio.Task[None]] = set()

    async def set_commands_soon(bot: Bot) -> None:
        """The menu is set beside polling, not before it: three calls to Telegram."""
        task = asyncio.create_task(_logged(set_commands(bot), "setting the command menu"))
        menu_setting.add(task)
        task.add_done_callback(menu_setting.discard)

    dp.startup.register(set_commands_soon)
    return dp


class WaitFor(BaseMiddleware):
    """Every update waits (bounded, by ``ready`` itself) for what it needs to be there."""

    def __init__(self, ready: Callable[[], Awaitable[object]]) -> None:
        self._ready = ready

    async def __call__(
        self,
        handler: Callable[[TelegramObject, dict[str, Any]], Awaitable[Any]],
        event: TelegramObject,
        data: dict[str, Any],
    ) -> Any:
        await self._ready()
        return await handler(event, data)


async def _logged(work: Awaitable[None], what: str) -> None:
    try:
        await work
    except Exception:  # deliberate: a menu Telegram refused must not stop the bot
        logging.getLogger(__name__).exception("%s failed", what)
