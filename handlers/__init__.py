"""aiogram routers, one per feature, assembled into a fresh Dispatcher by ``build_dispatcher``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from aiogram import Bot, Dispatcher
from aiogram.types import BotCommand

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
from handlers import approvals, basics, buttons, errors, money, replies, schedules, tasks
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


def build_dispatcher(
    service: TaskService,
    card: TaskCard,
    worktree_card: WorktreeCard,
    handover: Handover,
    answers: ApprovalAnswers,
    access: AccessPolicy,
    texts: Texts,
    outbox: Outbox,
    schedule_desk: ScheduleDesk,
    engine_status: list[str],
    fleet: FleetStatus,
    engines: Sequence[str],
    make: Callable[..., Dispatcher] = Dispatcher,
) -> Dispatcher:
    """Handlers reply through ``outbox`` (paced, durable, in order with task messages);
    ``engines`` name the task commands besides /detach (and their menu entries, from the
    catalogs' ``commands.<engine>``); ``make`` builds the Dispatcher itself (the bot's keeps a
    journal of updates)."""
    dp = make(
        tasks=service,
        card=card,
        worktree_card=worktree_card,
        handover=handover,
        answers=answers,
        texts=texts,
        outbox=outbox,
        schedules=schedule_desk,
        engine_status=engine_status,
        fleet=fleet,
        access=access,
    )
    dp.update.outer_middleware(AllowListMiddleware(access, texts, outbox))
    dp.update.outer_middleware(LocaleMiddleware(access, texts, outbox))
    dp.include_routers(
        basics.router(),
        tasks.router(engines),
        approvals.router(),
        money.router(),
        schedules.router(),
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

    dp.startup.register(set_commands)
    return dp
