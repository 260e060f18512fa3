"""The composition root: every object is built here from Settings (the use cases by
``bot.assembly``), and owned by one exit stack."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from aiogram import Bot, Dispatcher
from aiogram.client.default import DefaultBotProperties
from aiogram.client.session.base import BaseSession
from aiogram.client.telegram import TelegramAPIServer

from bot import config, lazy_types
from bot.approvals.answers import ApprovalAnswers
from bot.assembly import make_use_cases
from bot.board import make_board
from bot.core import Core, background, build_core, freeze_what_started, start_core
from bot.errors import ConfigError
from bot.fleet.status import FleetStatus
from bot.intake.inbox import Inbox
from bot.intake.intake import Intake
from bot.models import Phrase
from bot.ports import NO_LOGIN, Executor
from bot.prs.build import make_prs
from bot.prs.follow import PrFollower
from bot.schedules.desk import ScheduleDesk
from bot.schedules.timer import ScheduleTimer
from bot.settings import Settings
from bot.store import Store
from bot.store.db import Clock, utcnow
from bot.tasks.arrivals import Arrivals
from bot.tasks.audit import AuditLog
from bot.tasks.drafting import DraftBook
from bot.tasks.filing import TaskFiling
from bot.tasks.pending import PendingAsks
from bot.tasks.reads import TaskReads
from bot.tasks.scheduling import ScheduleBook
from bot.tasks.usecases import UseCases
from bot.tasks.waiting import Waiting
from bot.telegram.access import AccessPolicy
from bot.telegram.delivery import Delivery
from bot.telegram.journal import JournaledDispatcher, after_first_poll
from bot.telegram.outbox import Outbox
from bot.telegram.reach import reach_telegram
from bot.telegram.retry import RetryMiddleware
from bot.telegram.session import BotApiSession
from bot.telegram.texts import DEFAULT_LOCALE
from bot.telegram.topics import Topics
from bot.turns.pool import JobPool
from bot.upkeep.retention import Retention
from bot.voice.choice import make_recognizer
from bot.voice.drafts import VoiceDrafts
from executors import registry
from handlers import Services, build_dispatcher, release_routers

log = logging.getLogger(__name__)
BOT_NAME = "bot"  # the bot's runner name on a shared database (workers name themselves)


@dataclass(frozen=True, kw_only=True)
class App:
    settings: Settings
    store: Store
    bot: Bot
    dispatcher: Dispatcher
    pool: JobPool
    uses: UseCases
    intake: Intake
    outbox: Outbox
    schedules: ScheduleDesk
    core: Core
    polling: asyncio.Event  # set as the first getUpdates is asked for
    prs_follow: PrFollower  # its schedule starts APScheduler: registered in ``settle``

    @property
    def status(self) -> list[Phrase]:
        """The engines' start-up probe lines, as /status shows them (once ``settle`` ran)."""
        return self.core.engines.status

    async def settle(self) -> None:
        """What waits for the engines' probes: then the schedules' missed runs start once, and
        every schedule is registered from now; the open PRs are followed from now."""
        await self.core.engines.ready()
        await self.schedules.start()
        await self.prs_follow.start()


def make_bot(settings: Settings, session: BaseSession | None = None) -> Bot:
    if settings.bot_token is None:
        raise ConfigError("DETACH_BOT_TOKEN is not set")
    session = session or BotApiSession(api=TelegramAPIServer.from_base(settings.telegram_api_url))
    session.middleware(RetryMiddleware())
    return Bot(
        settings.bot_token.get_secret_value(),
        session=session,
        default=DefaultBotProperties(parse_mode="HTML", link_preview_is_disabled=True),
    )


def make_voice(core: Core, settings: Settings, uses: UseCases) -> VoiceDrafts:
    """Voice notes' drafts: a transcription server (DETACH_STT_BASE_URL), else the offline
    recognizer when installed (nothing of it is loaded before the first note)."""
    recognizer = make_recognizer(
        base_url=settings.stt_base_url,
        model=settings.stt_model,
        api_key=settings.stt_api_key,
        timeout_s=settings.stt_timeout_s,
        max_s=settings.stt_max_s,
        folder=settings.data_dir / "voice",
    )
    return VoiceDrafts(
        book=DraftBook(core.store),
        outbox=core.outbox,
        texts=core.texts,
        tasks=uses,
        recognizer=recognizer,
        max_s=settings.stt_max_s,
        max_bytes=uses.create.max_attachment_bytes,
    )


@contextlib.asynccontextmanager
async def build(
    settings: Settings,
    session: BaseSession | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Clock = utcnow,
    executors: Mapping[str, Executor] | None = None,
    settle: bool = True,
) -> AsyncIterator[App]:
    """Every object of a running bot; ``session``, ``environ``, ``clock`` and ``executors`` are
    the seams tests plug into (a Telegram session, the environment agents inherit, the
    schedules' clock, engines instead of the registry's, e.g. a fake that replays events).
    ``settle``: the engines have answered their probes and the schedules are registered before
    it returns; else ``App.settle`` does that (the bot polls Telegram meanwhile)."""
    async with contextlib.AsyncExitStack() as stack:
        bot = make_bot(settings, session)
        stack.push_async_callback(bot.session.close)
        core = await build_core(
            settings,
            stack,
            role=settings.role,
            name=BOT_NAME,
            environ=environ,
            given_executors=executors,
        )
        store, texts, outbox, notifier = core.store, core.texts, core.outbox, core.notifier
        delivery = Delivery(
            store=store,
            outbox=outbox,
            bot=bot,
            chat_interval_s=settings.outbox_chat_interval_s,
            group_interval_s=settings.outbox_group_interval_s,
            chat_burst=settings.outbox_chat_burst,
            topics=Topics(store, bot, texts, settings.topics),
            agents_first=core.pool.agents_started,
        )
        background(stack, delivery.run_forever, "outbox")
        polling = asyncio.Event()
        uses = make_use_cases(core, settings, environ)
        stack.push_async_callback(uses.create.aclose)  # routed turns' timers, before the store
        if uses.steering is not None:  # its follow-ups' timers end before the store
            stack.push_async_callback(uses.steering.aclose)
        if uses.preflight is not None:  # held tasks whose question waited too long
            background(stack, uses.preflight.desk.run_forever, "preflight")
        timer = ScheduleTimer(core.scheduler)
        schedules = ScheduleDesk(
            book=ScheduleBook(store, clock),
            timer=timer,
            service=uses.create,
            outbox=outbox,
            texts=texts,
            default_tz=settings.timezone,
            clock=clock,
        )
        answers = ApprovalAnswers(
            store, core.desk, notifier, texts, core.shared.takeover if core.shared else None
        )
        inbox = Inbox(
            directory=settings.data_dir / "inbox",
            service=uses.create,
            filing=TaskFiling(store, texts, settings.max_subtasks, settings.subtask_depth),
            outbox=outbox,
            texts=texts,
            allowed_users=settings.allowed_users,
        )
        intake = Intake(
            arrivals=Arrivals(store, notifier),
            queue=core.queue,
            interval_s=settings.intake_interval_s,
            inbox=inbox,
            alive=settings.data_dir / config.ALIVE_FILE,
            steers=uses.steering.carry_asked if uses.steering is not None else None,
        )
        # the database does not grow without bound: delivered rows, old transcripts
        retention = Retention(store, settings.retention_days, held=uses.held_files)
        background(stack, retention.run_forever, "retention")
        agent_environ = os.environ if environ is None else environ
        prs = make_prs(
            settings,
            agent_environ,
            store=store,
            texts=texts,
            notifier=notifier,
            worktrees=core.worktrees,
        )
        fleet = FleetStatus(store, settings.worker_lease_s, shared=core.shared is not None)
        dispatcher = build_dispatcher(
            Services(
                uses=uses,
                answers=answers,
                pending=PendingAsks(
                    store,
                    texts,
                    answers,
                    uses.preflight.desk if uses.preflight is not None else None,
                ),
                access=AccessPolicy(settings.allowed_users, store, texts),
                texts=texts,
                outbox=outbox,
                schedules=schedules,
                engine_status=core.engines.status,
                fleet=fleet,
                voice=make_voice(core, settings, uses),
                waiting=Waiting(store, texts, settings.timezone),
                audit=AuditLog(store, texts),
                prs=prs,
            ),
            engines=registry.names(),
            engines_ready=core.engines.ready,
            make=functools.partial(JournaledDispatcher, store, polling, core.pool.handed_over),
        )
        stack.callback(release_routers, dispatcher)  # the next dispatcher may include them
        await start_core(core, stack)
        board = make_board(  # None: DETACH_BOARD_PORT unset
            settings,
            reads=TaskReads(store),
            audit=AuditLog(store, texts),
            texts=texts,
            worktrees=core.worktrees,
            uses=uses,
            answers=answers,
            prs=prs,
            fleet=fleet,
        )
        dispatcher["board"] = board  # /board makes its sign-in links
        if board is not None:
            await stack.enter_async_context(board.serve())
            if board.mini_app:
                core.notifier.open_board_at(board.url)
        await stack.enter_async_context(timer.serve(schedules.on_fire))
        app = App(
            settings=settings,
            store=store,
            bot=bot,
            dispatcher=dispatcher,
            pool=core.pool,
            uses=uses,
            intake=intake,
            outbox=outbox,
            schedules=schedules,
            core=core,
            polling=polling,
            prs_follow=PrFollower(store, prs, core.scheduler, settings.pr_poll_s),
        )
        if settle:
            await app.settle()
        yield app


async def _settle_then_intake(app: App) -> None:
    """What waits until polling began: APScheduler's start, the probes' outcome, missed
    schedules, the first Telegram types (the longest step: ~0.4 s on the loop) and the intake.
    Engines that answer their probes at once (none installed) would otherwise put all that
    before the first ``getUpdates``."""
    await after_first_poll(app.polling)
    try:  # not before polling (~0.1 s); a turn handed over sooner starts it (bot.turns.scheduler)
        await app.core.scheduler.start()
    except Exception:  # deliberate: started again on first use, which then says why not
        log.exception("starting APScheduler failed")
    await app.settle()
    await _say_missing_engine(app)
    began = time.monotonic()
    try:
        await lazy_types.warm()  # the first task after a start does not build them
    except Exception:  # deliberate: a type that does not build now builds on first use
        log.exception("building the first Telegram types failed")
    else:
        log.info("first Telegram types built in %.0f ms", (time.monotonic() - began) * 1000)
    freeze_what_started()
    await app.intake.run_forever()


async def _say_missing_engine(app: App) -> None:
    """The default engine is not usable here, or finds no login: each allowed user hears it
    at start, not only the log (what to do, and /status)."""
    engine = app.settings.base_engine
    texts = app.core.texts
    if engine not in app.uses.create.engines:
        key, params = "setup.engine_missing", {"variable": f"DETACH_{engine.upper()}_BIN"}
    elif any(line.key == NO_LOGIN and line.params.get("engine") == engine for line in app.status):
        key, params = "setup.no_login", {}
    else:
        return
    locales = await app.store.users.locales()  # each in the language they chose
    for user_id in sorted(app.settings.allowed_users):
        locale = locales.get(user_id, DEFAULT_LOCALE)
        await app.outbox.send(user_id, texts.get(locale, key, engine=engine, **params))


async def serve(settings: Settings) -> None:
    """Run the bot until SIGTERM/SIGINT: long polling, intake, the job pool. Polling starts
    while the engines' probes still run; updates, the intake and the schedules wait for them."""
    async with build(settings, settle=False) as app:
        await reach_telegram(app.bot)
        intake_task = asyncio.create_task(_settle_then_intake(app), name="intake")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(
                sig, lambda: asyncio.ensure_future(app.dispatcher.stop_polling())
            )
        try:
            await app.dispatcher.start_polling(
                app.bot, handle_signals=False, close_bot_session=False
            )
        finally:
            intake_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await intake_task
