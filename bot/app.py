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
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from aiogram import Bot, Dispatcher
from aiogram.client.default import DefaultBotProperties
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.base import BaseSession
from aiogram.client.telegram import TelegramAPIServer

from bot.access import AccessPolicy
from bot.approval_answers import ApprovalAnswers
from bot.approvals import ApprovalDesk
from bot.card import TaskCard
from bot.errors import AgentNotInstalled, ConfigError
from bot.inbox import Inbox
from bot.intake import Intake, recover
from bot.journal import JournaledDispatcher
from bot.models import Engine
from bot.money import MoneyDesk
from bot.notifier import Notifier
from bot.outbox import Outbox
from bot.pool import JobPool
from bot.ports import Executor
from bot.presets import PresetCatalog
from bot.queue import TurnQueue
from bot.runner import TurnRunner
from bot.schedules import ScheduleDesk
from bot.service import TaskService
from bot.settings import Settings
from bot.store import Store
from bot.store.db import Clock, utcnow
from bot.telegram_retry import RetryMiddleware
from bot.texts import Texts
from bot.workdirs import WorkdirPolicy
from bot.worktree_card import WorktreeCard
from bot.worktrees import Worktrees
from executors.claude import PINNED_VERSION as CLAUDE_PINNED
from executors.claude import ClaudeExecutor
from executors.codex import PINNED_VERSION as CODEX_PINNED
from executors.codex import CodexExecutor
from executors.process import kill_tagged
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


def make_bot(settings: Settings, session: BaseSession | None = None) -> Bot:
    if settings.bot_token is None:
        raise ConfigError("DETACH_BOT_TOKEN is not set")
    session = session or AiohttpSession(api=TelegramAPIServer.from_base(settings.telegram_api_url))
    session.middleware(RetryMiddleware())
    return Bot(settings.bot_token.get_secret_value(), session=session,
               default=DefaultBotProperties(parse_mode="HTML", link_preview_is_disabled=True))


async def make_executors(settings: Settings, environ: Mapping[str, str]
                         ) -> tuple[dict[Engine, Executor], list[str]]:
    """The engines that answer ``--version`` on this machine, and a status line for each."""
    executors: dict[Engine, Executor] = {}
    status: list[str] = []
    claude = ClaudeExecutor(settings.resolved_claude_bin(), environ, settings.secret_values(),
                            settings.cancel_grace_s)
    codex = CodexExecutor(settings.resolved_codex_bin(), environ, settings.secret_values(),
                          settings.cancel_grace_s, settings.codex_approval_policy,
                          settings.codex_sandbox)
    for engine, executor, pinned in ((Engine.CLAUDE, claude, CLAUDE_PINNED),
                                     (Engine.CODEX, codex, CODEX_PINNED)):
        try:
            version = await executor.version()
        except AgentNotInstalled:
            log.warning("%s CLI not found (DETACH_%s_BIN or PATH): unavailable", engine,
                        engine.upper())
            status.append(f"{engine}: not installed")
            continue
        executors[engine] = executor
        note = "" if version == pinned else f" (tested with {pinned})"
        log.info("%s CLI %s%s", engine, version, note)
        status.append(f"{engine} {version}{note}")
    if Engine.CODEX in executors:
        status[-1] += await _codex_sandbox_status(codex)
    return executors, status


async def _codex_sandbox_status(codex: CodexExecutor) -> str:
    if codex.sandbox == "danger-full-access" or await codex.sandbox_works():
        return f", sandbox {codex.sandbox}"
    codex.refuse_sandbox()
    log.warning("codex sandbox cannot work here (no user namespaces): sandboxed Codex turns "
                "are refused; set DETACH_CODEX_SANDBOX=danger-full-access to run unsandboxed "
                "with approvals")
    return ", sandbox UNAVAILABLE (no user namespaces): sandboxed turns are refused"


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


async def build_core(settings: Settings, stack: contextlib.AsyncExitStack, bot: Bot | None,
                     environ: Mapping[str, str] | None, clock: Clock, role: str,
                     identity: str) -> Core:
    """The shared objects; the pool is not started yet (``start_core`` does that)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    if role != "both" and settings.jobs_database_url is None:
        raise ConfigError("scale-out (DETACH_ROLE=front, `detach worker`) needs the shared "
                          "PostgreSQL database: set DETACH_DATABASE_URL=postgresql+asyncpg://…")
    store = await Store.open(settings.resolved_database_url)
    stack.push_async_callback(store.close)
    texts = Texts()
    outbox = Outbox(store, bot, settings.outbox_chat_interval_s,
                    settings.outbox_group_interval_s)
    notifier = Notifier(store, texts, outbox)
    executors, status = await make_executors(settings,
                                             os.environ if environ is None else environ)
    runner: TurnRunner | None = None

    async def handle(turn_id, control):  # type: ignore[no-untyped-def]
        assert runner is not None
        await runner.run_turn(turn_id, control)

    pool = JobPool(settings.jobs_database_url, identity, settings.max_concurrent_turns,
                   settings.turn_timeout_s, handle, role)
    queue = TurnQueue(store, pool)
    poll_s = SHARED_POLL_S if settings.jobs_database_url else None  # scale-out: other processes
    desk = ApprovalDesk(store, notifier, texts, settings.approval_timeout_s, poll_s)
    money = MoneyDesk(store, PresetCatalog.load(settings.config), settings.daily_cap_usd,
                      settings.task_cap_usd)
    worktrees = Worktrees(store, settings.data_dir / "worktrees")
    workdirs = WorkdirPolicy(settings.default_workdir, settings.allowed_workdirs,
                             internal=[worktrees.root])
    runner = TurnRunner(store, executors, notifier, queue, desk, money,
                        settings.auto_allowed_tools, settings.progress_interval_s, workdirs,
                        runner_id=identity, stop_poll_s=poll_s,
                        process_tag=process_tag(settings, identity))
    engines = set(Engine) if role == "scheduler" else set(executors)  # front: workers have them
    service = TaskService(store, pool, queue, notifier, texts, engines,
                          settings.max_prompt_chars, workdirs,
                          Engine(settings.default_engine), money, settings.approval_mode,
                          worktrees=worktrees, default_worktree=settings.worktrees)
    schedules = ScheduleDesk(store, pool, service, outbox, texts, settings.timezone, clock)
    return Core(store, texts, outbox, notifier, status, pool, queue, desk, worktrees, service,
                schedules)


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
    await stack.enter_async_context(core.pool)
    core.pool.on_schedule = core.schedules.on_fire


@contextlib.asynccontextmanager
async def build(settings: Settings, session: BaseSession | None = None,
                environ: Mapping[str, str] | None = None,
                clock: Clock = utcnow) -> AsyncIterator[App]:
    """Every object of a running bot; ``session``, ``environ`` and ``clock`` are the seams tests
    plug into (a Telegram session, the environment agents inherit, the schedules' clock)."""
    async with contextlib.AsyncExitStack() as stack:
        bot = make_bot(settings, session)
        stack.push_async_callback(bot.session.close)
        core = await build_core(settings, stack, bot, environ, clock,
                                "both" if settings.role == "all" else "scheduler",
                                f"detach-{socket.gethostname()}")
        store, texts, outbox, notifier = core.store, core.texts, core.outbox, core.notifier
        delivery = asyncio.create_task(outbox.run_forever(), name="outbox")
        stack.push_async_callback(_stop, delivery)
        service = core.service
        answers = ApprovalAnswers(store, core.desk, notifier, texts)
        inbox = Inbox(settings.data_dir / "inbox", service, store, outbox, texts,
                      settings.allowed_users)
        intake = Intake(store, core.queue, notifier, settings.intake_interval_s, inbox)
        access = AccessPolicy(settings.allowed_users, store, texts)
        card = TaskCard(service, store, core.queue, notifier, texts)
        dispatcher = build_dispatcher(
            service, card, WorktreeCard(service, core.worktrees, notifier, texts), answers,
            access, texts, outbox, core.schedules, core.status,
            make=functools.partial(JournaledDispatcher, store))
        await start_core(core, settings, stack)
        await core.schedules.start()  # missed runs once, then every schedule from now
        yield App(settings, store, bot, dispatcher, core.pool, service, intake, outbox,
                  core.schedules)


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def serve(settings: Settings) -> None:
    """Run the bot until SIGTERM/SIGINT: long polling, intake, the job pool."""
    async with build(settings) as app:
        intake_task = asyncio.create_task(app.intake.run_forever(), name="intake")
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(
                app.dispatcher.stop_polling()))
        try:
            await app.dispatcher.start_polling(app.bot, handle_signals=False,
                                               close_bot_session=False)
        finally:
            intake_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await intake_task
