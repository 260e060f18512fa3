"""aiogram routers, one per feature, assembled into a Dispatcher by ``build_dispatcher``.

Each feature module has a module-level ``router`` and module-level handlers registered on it at
import (aiogram's own examples), so a handler can be found, imported and called by a test. What
a handler needs it receives by parameter name from aiogram's workflow data: the ``Services``,
the engines' command names as ``engine_commands``, and what the middlewares add per update
(``user_id``, ``locale``, ``reply``).

A router belongs to one parent at a time: aiogram refuses to include a router that already has
one and has no public way to take it out again (3.31.0: ``Router.parent_router``'s setter
refuses ``None``). The composition root owns the dispatcher, so it owns the routers' loan:
``build_dispatcher`` includes the module routers, and the root calls ``release_routers`` when
it tears the dispatcher down (``bot/app.py``: on its exit stack). That takes them out of the
dispatcher's ``sub_routers`` and clears ``_parent_router``, aiogram's private attribute, which
is why aiogram is pinned ==3.31.0; ``release_routers`` checks that it worked, and
``tests/test_handler_functions.py`` fails loudly on a version where it does not.
So one dispatcher at a time per process, which is what the bot builds (one per run) and what
the tests do (one after another); a second while the first is alive is refused with a clear
error rather than aiogram's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiogram import BaseMiddleware, Bot, Dispatcher, Router
from aiogram.types import BotCommand, TelegramObject

from bot.approvals.answers import ApprovalAnswers
from bot.fleet.status import FleetStatus
from bot.models import Phrase
from bot.prs.desk import PullRequests
from bot.schedules.desk import ScheduleDesk
from bot.tasks.audit import AuditLog
from bot.tasks.pending import PendingAsks
from bot.tasks.usecases import UseCases
from bot.tasks.waiting import Waiting
from bot.telegram.access import AccessPolicy
from bot.telegram.outbox import Outbox
from bot.telegram.texts import DEFAULT_LOCALE, Texts
from bot.voice.drafts import VoiceDrafts
from handlers import (
    approvals,
    audit,
    basics,
    board,
    buttons,
    errors,
    held,
    hosts,
    money,
    prs,
    replies,
    schedules,
    steering,
    tasks,
    terminal,
    voice,
)
from handlers.access import AllowListMiddleware
from handlers.locale import LocaleMiddleware

# the menu: /detach, then one command per engine, then these
COMMANDS = (
    "tasks",
    "pending",
    "prs",
    "limits",
    "result",
    "adopt",
    "export",
    "cancel",
    "archive",
    "grants",
    "audit",
    "every",
    "at",
    "schedules",
    "tz",
    "model",
    "spend",
    "cd",
    "notify",
    "status",
    "hosts",
    "host",
    "board",
    "lang",
    "help",
)
# first match wins: the catch-alls (stale buttons, unknown commands, plain text) come last
ROUTERS: tuple[Router, ...] = (
    basics.router,
    tasks.router,
    approvals.router,
    audit.router,
    money.router,
    schedules.router,
    board.router,
    held.router,
    voice.router,
    steering.router,
    terminal.router,
    prs.router,
    hosts.router,
    buttons.router,
    replies.router,
    errors.router,
)


@dataclass(frozen=True, slots=True)
class Services:
    """What handlers are given by name (aiogram's workflow data): these, and each use case under
    its field's name in ``UseCases`` (a parameter named ``lookup`` receives ``uses.lookup``)."""

    uses: UseCases
    answers: ApprovalAnswers
    pending: PendingAsks  # /pending: what waits on the owner, shown again with its buttons
    access: AccessPolicy
    texts: Texts
    outbox: Outbox
    schedules: ScheduleDesk
    engine_status: list[Phrase]  # filled in once the engines' probes answered
    fleet: FleetStatus
    voice: VoiceDrafts  # voice notes' drafts
    waiting: Waiting  # what waits on the owner (/tasks), the engines' usage windows (/limits)
    audit: AuditLog  # /audit: the owner's approvals, grants, budget decisions and cancels
    prs: PullRequests | None = None  # ⬆️ Push and Open PR (bot.prs)


def build_dispatcher(
    services: Services,
    *,
    engines: Sequence[str],
    engines_ready: Callable[[], Awaitable[object]],
    make: Callable[..., Dispatcher] = Dispatcher,
) -> Dispatcher:
    """A dispatcher with the handlers' routers included; its owner calls ``release_routers``
    when done with it (the next one may include them then). Handlers reply through the outbox
    (paced, durable, in order with task messages); ``engines`` name the task commands besides
    /detach (``engine_commands`` to the handlers, and the menu's entries, from the catalogs'
    ``commands.<engine>``); an update is handled once ``engines_ready`` (the engines' start-up
    probes, which run while polling starts); ``make`` builds the Dispatcher itself (the bot's
    keeps a journal of updates). Raises RuntimeError while another dispatcher holds them."""
    held = [r.name for r in ROUTERS if r.parent_router is not None]
    if held:
        raise RuntimeError(f"routers {held} serve another dispatcher: one at a time per process")
    fields = {f: getattr(services, f) for f in Services.__dataclass_fields__}
    fields |= {f: getattr(services.uses, f) for f in UseCases.__dataclass_fields__}
    dp = make(**fields, engine_commands=tuple(engines))
    access, texts, outbox = services.access, services.texts, services.outbox
    dp.update.outer_middleware(WaitFor(engines_ready))
    dp.update.outer_middleware(AllowListMiddleware(access, texts, outbox))
    dp.update.outer_middleware(LocaleMiddleware(access, texts, outbox))
    dp.startup.register(_menu_setter(texts, engines))
    dp.include_routers(*ROUTERS)
    return dp


def release_routers(dp: Dispatcher) -> None:
    """Take the handlers' routers back from ``dp`` (those it holds; any other is left alone).
    Raises RuntimeError if aiogram no longer lets go of them this way (an aiogram upgrade)."""
    for router in ROUTERS:
        if router.parent_router is dp:
            dp.sub_routers.remove(router)
            router._parent_router = None  # no public way (see the module's docstring)
    kept = [r.name for r in ROUTERS if r.parent_router is dp or r in dp.sub_routers]
    if kept:
        raise RuntimeError(f"aiogram did not release routers {kept}: is it still ==3.31.0?")


def _menu_setter(texts: Texts, engines: Sequence[str]) -> Callable[[Bot], Awaitable[None]]:
    """The startup hook that sets the command menu beside polling."""

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

    return set_commands_soon


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
