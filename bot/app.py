"""The composition root: every object is built here from Settings, and owned by one exit stack."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from aiogram import Bot, Dispatcher
from aiogram.client.default import DefaultBotProperties
from aiogram.client.session.base import BaseSession
from aiogram.client.telegram import TelegramAPIServer

from bot import config
from bot.approvals.answers import ApprovalAnswers
from bot.approvals.desk import ApprovalDesk
from bot.engines import make_executors
from bot.errors import ConfigError
from bot.intake.inbox import Inbox
from bot.intake.intake import Intake, recover
from bot.models import ProcessRole
from bot.money.desk import MoneyDesk
from bot.money.presets import PresetCatalog
from bot.ports import LOGIN_MISSING, Executor
from bot.schedules.desk import ScheduleDesk
from bot.settings import Settings
from bot.store import Store
from bot.store.db import Clock, utcnow
from bot.tasks.card import TaskCard
from bot.tasks.handover import Handover
from bot.tasks.service import TaskDefaults, TaskService
from bot.tasks.workdirs import WorkdirPolicy
from bot.telegram.access import AccessPolicy
from bot.telegram.journal import JournaledDispatcher
from bot.telegram.notifier import Notifier
from bot.telegram.outbox import Outbox
from bot.telegram.reach import reach_telegram
from bot.telegram.retry import RetryMiddleware
from bot.telegram.session import BotApiSession
from bot.telegram.texts import DEFAULT_LOCALE, Texts
from bot.turns.pool import JobPool
from bot.turns.queue import TurnQueue
from bot.turns.runner import TurnPolicy, TurnRunner
from bot.worktrees.card import WorktreeCard
from bot.worktrees.git import Worktrees
from executors import registry
from executors.check import ShellCheck
from executors.tree import kill_tagged
from handlers import build_dispatcher

log = logging.getLogger(__name__)
SHARED_POLL_S = 1.0  # how soon a worker sees a /cancel or an answer the bot took


@dataclass(frozen=True)
class App:
    settings: Settings
    store: Store
    bot: Bot
    dispatcher: Dispatcher
    pool: JobPool
    service: TaskService
    intake: Intake
    outbox: Outbox
    schedules: ScheduleDesk
    status: tuple[str, ...] = ()  # the engines' start-up probe lines, as /status shows them


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


@dataclass(frozen=True)
class Core:
    """What the bot and a scale-out worker share: the store, the outbox's producer side, the
    job pool and everything a turn or a schedule run needs."""

    store: Store
    texts: Texts
    outbox: Outbox
    notifier: Notifier
    status: list[str]
    pool: JobPool
    queue: TurnQueue
    desk: ApprovalDesk
    worktrees: Worktrees
    service: TaskService
    schedules: ScheduleDesk
    runner: TurnRunner


async def build_core(
    settings: Settings,
    stack: contextlib.AsyncExitStack,
    bot: Bot | None,
    environ: Mapping[str, str] | None,
    clock: Clock,
    role: ProcessRole,
    identity: str,
    given_executors: Mapping[str, Executor] | None = None,
) -> Core:
    """The shared objects; the pool is not started yet (``start_core`` does that)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if role is not ProcessRole.ALL and settings.jobs_database_url is None:
        raise ConfigError(
            "scale-out (DETACH_ROLE=front, `detach worker`) needs the shared "
            "PostgreSQL database: set DETACH_DATABASE_URL=postgresql+asyncpg://…"
        )
    store = await Store.open(settings.resolved_database_url)
    stack.push_async_callback(store.close)
    texts = Texts()
    outbox = Outbox(
        store,
        bot,
        settings.outbox_chat_interval_s,
        settings.outbox_group_interval_s,
        chat_burst=settings.outbox_chat_burst,
    )
    notifier = Notifier(store, texts, outbox)
    agent_environ = os.environ if environ is None else environ
    executors, status = await make_executors(
        settings, agent_environ, given_executors, store.engine_sessions
    )
    pool = JobPool(
        settings.jobs_database_url,
        identity,
        settings.max_concurrent_turns,
        settings.turn_timeout_s,
        role,
    )
    queue = TurnQueue(store, pool)
    poll_s = SHARED_POLL_S if settings.jobs_database_url else None  # scale-out: other processes
    desk = ApprovalDesk(store, notifier, texts, settings.approval_timeout_s, poll_s)
    presets = PresetCatalog.load(settings.config, registry.builtin_presets())
    money = MoneyDesk(store, presets, settings.daily_cap_usd, settings.task_cap_usd)
    worktrees = Worktrees(store, settings.data_dir / "worktrees")
    workdirs = WorkdirPolicy(
        settings.default_workdir, settings.allowed_workdirs, internal=[worktrees.root]
    )
    runner = TurnRunner(
        store=store,
        executors=executors,
        notifier=notifier,
        queue=queue,
        desk=desk,
        money=money,
        policy=TurnPolicy(
            auto_allowed_tools=settings.auto_allowed_tools,
            progress_interval_s=settings.progress_interval_s,
            progress_delay_s=settings.progress_delay_s,
            check_rounds=settings.check_rounds,
            sandbox_domains=settings.sandbox_allowed_domains,
            timezone=settings.timezone,
            limit_retry_s=settings.limit_retry_s,
            subtask_command=(sys.executable, "-m", "bot", "mcp"),
            subtask_env=subtask_env(settings),
        ),
        workdirs=workdirs,
        runner_id=identity,
        stop_poll_s=poll_s,
        process_tag=process_tag(settings, identity),
        checks=ShellCheck(agent_environ, settings.secret_values(), settings.check_timeout_s),
    )
    # a front bot accepts every engine (its workers have the CLIs)
    engines = set(registry.names()) if role is ProcessRole.FRONT else set(executors)
    service = TaskService(
        store=store,
        pool=pool,
        queue=queue,
        notifier=notifier,
        texts=texts,
        money=money,
        workdirs=workdirs,
        worktrees=worktrees,
        engines=engines,
        defaults=TaskDefaults(
            engine=settings.default_engine,
            max_prompt_chars=settings.max_prompt_chars,
            session_mode=settings.approval_mode,
            detach_mode=settings.detach_mode,
            worktree=settings.worktrees,
            sandbox_problem=functools.partial(sandbox_problem, executors),
            plain_text_tasks=settings.plain_text == "task",
            max_attachment_bytes=int(settings.max_attachment_mb * 1024 * 1024),
            attachments_staging=settings.data_dir / "attachments",
            timezone=settings.timezone,
            subtask_engines=frozenset(s.name for s in registry.ENGINES if s.mcp_client),
        ),
    )
    schedules = ScheduleDesk(store, pool, service, outbox, texts, settings.timezone, clock)
    return Core(
        store,
        texts,
        outbox,
        notifier,
        status,
        pool,
        queue,
        desk,
        worktrees,
        service,
        schedules,
        runner,
    )


def sandbox_problem(executors: Mapping[str, Executor], engine: str) -> str | None:
    """Why ``engine`` cannot run sandboxed here; None where it can, or where it runs elsewhere
    (a front bot: its workers' CLIs refuse a sandbox they do not have)."""
    executor = executors.get(engine)
    return executor.sandbox_problem() if executor is not None else None


def subtask_env(settings: Settings) -> dict[str, str]:
    """What `detach mcp --parent N`, started by an agent, needs to reach this bot: its data
    directory and database, its users and limits, and this code; never the bot's token."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", ""),
        "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
        "DETACH_DATA_DIR": str(settings.data_dir.resolve()),
        "DETACH_DATABASE_URL": settings.resolved_database_url,
        "DETACH_ALLOWED_USERS": ",".join(str(u) for u in sorted(settings.allowed_users)),
        "DETACH_MAX_PROMPT_CHARS": str(settings.max_prompt_chars),
        "DETACH_MAX_SUBTASKS": str(settings.max_subtasks),
    }
    return {k: v for k, v in env.items() if v}


def process_tag(settings: Settings, identity: str) -> str:
    """This process's prefix of the tag its agent processes carry: one per database and
    process identity, so two bots on one machine never stop each other's agents."""
    key = f"{settings.resolved_database_url}|{identity}".encode()
    return hashlib.sha256(key).hexdigest()[:16]


async def start_core(core: Core, settings: Settings, stack: contextlib.AsyncExitStack) -> None:
    """Stop what a crashed run of this process left behind (agents, their daemons), recover
    its turns, then start the job pool."""
    shared = core.pool.identity if settings.jobs_database_url else None  # else: one process
    await asyncio.to_thread(kill_tagged, process_tag(settings, core.pool.identity) + ":")
    await recover(core.store, core.notifier, core.desk, shared)
    await stack.enter_async_context(core.pool.serve(core.runner.run_turn, core.schedules.on_fire))


@contextlib.asynccontextmanager
async def build(
    settings: Settings,
    session: BaseSession | None = None,
    environ: Mapping[str, str] | None = None,
    clock: Clock = utcnow,
    executors: Mapping[str, Executor] | None = None,
) -> AsyncIterator[App]:
    """Every object of a running bot; ``session``, ``environ``, ``clock`` and ``executors`` are
    the seams tests plug into (a Telegram session, the environment agents inherit, the
    schedules' clock, engines instead of the registry's, e.g. a fake that replays events)."""
    async with contextlib.AsyncExitStack() as stack:
        bot = make_bot(settings, session)
        stack.push_async_callback(bot.session.close)
        core = await build_core(
            settings,
            stack,
            bot,
            environ,
            clock,
            settings.role,
            f"detach-{socket.gethostname()}",
            executors,
        )
        store, texts, outbox, notifier = core.store, core.texts, core.outbox, core.notifier
        delivery = asyncio.create_task(outbox.run_forever(), name="outbox")
        stack.push_async_callback(_stop, delivery)
        service = core.service
        answers = ApprovalAnswers(store, core.desk, notifier, texts)
        inbox = Inbox(
            settings.data_dir / "inbox",
            service,
            store,
            outbox,
            texts,
            settings.allowed_users,
            settings.max_subtasks,
        )
        intake = Intake(
            store,
            core.queue,
            notifier,
            settings.intake_interval_s,
            inbox,
            alive=settings.data_dir / config.ALIVE_FILE,
        )
        access = AccessPolicy(settings.allowed_users, store, texts)
        card = TaskCard(service, store, notifier, texts)
        dispatcher = build_dispatcher(
            service,
            card,
            WorktreeCard(service, core.worktrees, notifier, texts),
            Handover(service, store, core.queue, notifier),
            answers,
            access,
            texts,
            outbox,
            core.schedules,
            core.status,
            engines=registry.names(),
            make=functools.partial(JournaledDispatcher, store),
        )
        await start_core(core, settings, stack)
        await core.schedules.start()  # missed runs once, then every schedule from now
        yield App(
            settings,
            store,
            bot,
            dispatcher,
            core.pool,
            service,
            intake,
            outbox,
            core.schedules,
            tuple(core.status),
        )


async def _say_missing_engine(app: App) -> None:
    """The default engine is not usable here, or finds no login: each allowed user hears it
    at start, not only the log (what to do, and /status)."""
    engine = app.settings.default_engine
    texts = app.service.texts
    if engine not in app.service.available_engines:
        variable = f"DETACH_{engine.upper()}_BIN"
        text = texts.get(DEFAULT_LOCALE, "setup.engine_missing", engine=engine, variable=variable)
    elif any(line.startswith(f"{engine} ") and LOGIN_MISSING in line for line in app.status):
        text = texts.get(DEFAULT_LOCALE, "setup.no_login", engine=engine)
    else:
        return
    for user_id in sorted(app.settings.allowed_users):
        await app.outbox.send(user_id, text)


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def serve(settings: Settings) -> None:
    """Run the bot until SIGTERM/SIGINT: long polling, intake, the job pool."""
    async with build(settings) as app:
        await reach_telegram(app.bot)
        await _say_missing_engine(app)
        intake_task = asyncio.create_task(app.intake.run_forever(), name="intake")
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
