"""What the bot and a scale-out worker share, built from Settings: the store, the outbox's
producers' side, the engines, the process's one APScheduler (``bot.turns.scheduler``) and the
job pool whose turns run in it, everything a turn needs, and on a shared database the runner's
lease, takeover and claiming. Nothing here imports a Telegram library: a worker runs turns with
this alone (``bot.app`` adds the Telegram side for the bot)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa

from bot import config
from bot.approvals.desk import ApprovalDesk
from bot.engines import Engines, make_engines
from bot.errors import ConfigError
from bot.fleet.dispatch import Dispatcher
from bot.fleet.fleet import Fleet
from bot.fleet.lease import Lease, OneProcess
from bot.fleet.takeover import Takeover
from bot.git.worktrees import Worktrees
from bot.mcp.launch import ZYGOTE_AFTER_START_S, Zygote, mcp_command, private_dir, subtask_env
from bot.models import OwnerTools, ProcessRole
from bot.money.desk import MoneyDesk
from bot.money.presets import PresetCatalog
from bot.ports import Executor
from bot.prs.token import gh_token
from bot.redaction import Redactor, redacted_logs
from bot.settings import Settings, key_variables, known_secrets
from bot.store import Presence, Store
from bot.store.ownership import owned, owner
from bot.telegram.notifier import Notifier
from bot.telegram.outbox import Outbox
from bot.telegram.render import plain
from bot.telegram.texts import DEFAULT_LOCALE, Texts
from bot.turns.pool import JobPool
from bot.turns.queue import TurnQueue
from bot.turns.runner import TurnRunner
from bot.turns.scheduler import JobScheduler
from bot.turns.specs import TurnPolicy
from bot.upkeep.recovery import recover
from bot.workdirs import WorkdirPolicy
from bot.worktrees.revival import Revival
from executors import orphans, registry
from executors.ahead import SpawnAhead
from executors.check import ShellCheck
from executors.denied import ReadDenial
from executors.gitguard import GitGuard
from executors.procs import kill_tagged, this_run
from executors.warm import WarmPool
from executors.watchdog import Watchdog

log = logging.getLogger(__name__)
SHARED_POLL_S = 1.0  # how soon a worker sees a /cancel or an answer the bot took


@dataclass(frozen=True)
class Shared:
    """Scale-out on PostgreSQL: this runner's lease, the loop that renews it and takes over
    lapsed runners, and (unless it is a front) the claiming of turns."""

    lease: Lease
    fleet: Fleet
    takeover: Takeover
    dispatcher: Dispatcher | None


@dataclass(frozen=True, kw_only=True)
class Core:
    store: Store
    texts: Texts
    outbox: Outbox
    notifier: Notifier
    engines: Engines  # probed in the background: ``engines.ready()`` before reading them
    scheduler: JobScheduler  # the process's APScheduler: the turns' jobs, the schedules
    pool: JobPool
    queue: TurnQueue
    desk: ApprovalDesk
    money: MoneyDesk
    workdirs: WorkdirPolicy
    worktrees: Worktrees
    runner: TurnRunner
    tag: str  # this process's prefix of the tag its agent processes carry
    shared: Shared | None = None


async def build_core(
    settings: Settings,
    stack: contextlib.AsyncExitStack,
    *,
    role: ProcessRole,
    name: str,
    environ: Mapping[str, str] | None = None,
    given_executors: Mapping[str, Executor] | None = None,
) -> Core:
    """The shared objects of a process called ``name`` on this host; the pool is not started
    yet (``start_core`` does that)."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    shared_db = settings.jobs_database_url is not None
    if role is not ProcessRole.ALL and not shared_db:
        raise ConfigError(
            "scale-out (DETACH_ROLE=front, `detach worker`) needs the shared "
            "PostgreSQL database: set DETACH_DATABASE_URL=postgresql+asyncpg://…"
        )
    host = settings.host_name or socket.gethostname()
    # before anything touches the database or the agents: a second bot (or a worker under a
    # taken name) would sweep away the live one's agents and recover its running turns
    await stack.enter_async_context(owned(settings.resolved_database_url, *owner(role, name, host)))
    agent_environ = os.environ if environ is None else environ
    presets = PresetCatalog.load(settings.config, registry.builtin_presets())
    keys = key_variables(settings, presets.all())
    # the token `gh auth token` gives Open PR (bot.prs) is hidden like the bot's own
    gh = await gh_token(settings.gh_bin) if role is not ProcessRole.WORKER else ""
    secrets = (*known_secrets(settings, agent_environ, keys), *([gh] if gh else []))
    redact = Redactor.of(secrets)
    stack.enter_context(redacted_logs(redact))
    store = await Store.open(settings.resolved_database_url, redact=redact)
    stack.push_async_callback(store.close)
    texts = Texts()
    outbox = Outbox(store)
    notifier = Notifier(store, texts, outbox)
    warm = (
        WarmPool(settings.warm_ttl_s, saved=private_dir(settings) / "warm.json")
        if settings.warm_agents
        else None
    )
    if warm is not None:  # stopped after the pool's turns (entered later), whole trees
        stack.push_async_callback(warm.aclose)
    zygote = Zygote(settings)
    stack.push_async_callback(zygote.aclose)  # after the pool's turns (entered later)
    spawn_ahead = SpawnAhead() if settings.spawn_ahead and role is not ProcessRole.FRONT else None
    if spawn_ahead is not None:  # after the pool's turns (entered later)
        stack.push_async_callback(spawn_ahead.aclose)
    engines = make_engines(
        settings,
        agent_environ,
        given_executors,
        store.engine_sessions,
        presets=presets.all(),
        logged=lambda line: plain(texts.say(DEFAULT_LOCALE, line)),
        warm=warm,
        mcp_ahead=zygote.ahead,
        spawn_ahead=spawn_ahead,
    )
    background(stack, engines.probe, "probes")  # meanwhile the rest is built, polling starts
    executors = engines.available
    identity = stable_identity(role, name, host)
    announce = store.claims.announce if shared_db else None
    # left after the pool and the timer (entered later), before the store closes
    scheduler = await stack.enter_async_context(JobScheduler())
    pool = JobPool(
        identity, settings.max_concurrent_turns, settings.turn_timeout_s, announce, scheduler
    )
    queue = TurnQueue(store, pool)
    poll_s = SHARED_POLL_S if shared_db else None  # scale-out: other processes answer
    desk = ApprovalDesk(store, notifier, texts, settings.approval_timeout_s, poll_s)
    money = MoneyDesk(store, presets, settings.daily_cap_usd, settings.task_cap_usd)
    denial = read_denial(settings, agent_environ)
    if role is not ProcessRole.FRONT and settings.owner_tools is not OwnerTools.NO:
        zygote.soon(ZYGOTE_AFTER_START_S)
    policy = turn_policy(settings, secrets, denial, keys, zygote.wanted)
    stack.push_async_callback(policy.git.aclose)  # a baseline's jail started ahead
    worktrees = Worktrees(store, settings.data_dir / "worktrees", policy.git)
    workdirs = WorkdirPolicy(
        settings.default_workdir, settings.allowed_workdirs, internal=[worktrees.root]
    )
    lease = Lease(
        store,
        name=name,
        host=host,
        role=role.value,
        lease_s=settings.worker_lease_s,
        engines=executors.keys,
        presence=lambda: host_presence(settings, role, engines, pool),
    )
    tag = process_tag(settings, identity)
    runner = TurnRunner(
        store=store,
        engines=engines,
        notifier=notifier,
        queue=queue,
        desk=desk,
        money=money,
        policy=policy,
        workdirs=workdirs,
        identity=lease if shared_db else OneProcess(identity),
        stop_poll_s=poll_s,
        process_tag=tag,
        checks=ShellCheck(
            agent_environ,
            settings.secret_values(),
            settings.check_timeout_s,
            nice=settings.agent_nice,
            denied=denial.paths,
            hidden=keys,
        ),
        worktrees=Revival(worktrees, notifier, texts),
    )
    stack.push_async_callback(runner.openings.aclose)  # first baselines read ahead
    shared = None
    if shared_db:
        takeover = Takeover(store, notifier, desk)
        dispatcher = (
            None
            if role is ProcessRole.FRONT
            else Dispatcher(
                store,
                pool,
                lease,
                engines=executors.keys,
                listen_dsn=listen_dsn(settings),
                projects={name: str(path) for name, path in settings.projects},
                prefer_s=settings.host_preference_s,
            )
        )
        shared = Shared(lease, Fleet(store, lease, takeover, pool), takeover, dispatcher)
    return Core(
        store=store,
        texts=texts,
        outbox=outbox,
        notifier=notifier,
        engines=engines,
        scheduler=scheduler,
        pool=pool,
        queue=queue,
        desk=desk,
        money=money,
        workdirs=workdirs,
        worktrees=worktrees,
        runner=runner,
        tag=tag,
        shared=shared,
    )


def read_denial(settings: Settings, environ: Mapping[str, str]) -> ReadDenial:
    """What sandboxed turns and checks may not read: the settings file in use (found as it
    was when these settings were loaded), the data directory, the usual keys and
    DETACH_SANDBOX_DENY_READ."""
    try:
        settings_file = config.env_file(environ, Path.cwd())
    except ConfigError:
        settings_file = None
    return ReadDenial.of(
        environ, settings.data_dir.resolve(), settings_file, settings.sandbox_deny_read
    )


def turn_policy(
    settings: Settings,
    secrets: tuple[str, ...] = (),
    denial: ReadDenial | None = None,
    keys: tuple[str, ...] = (),
    mcp_wanted: Callable[[], None] | None = None,
) -> TurnPolicy:
    """``secrets``: ``known_secrets``, which no baseline records; no sandboxed command gets
    ``keys``."""
    return TurnPolicy(
        secrets=secrets,
        secret_names=keys,
        auto_allowed_tools=settings.auto_allowed_tools,
        progress_interval_s=settings.progress_interval_s,
        progress_delay_s=settings.progress_delay_s,
        check_rounds=settings.check_rounds,
        sandbox_domains=settings.sandbox_allowed_domains,
        timezone=settings.timezone,
        limit_retry_s=settings.limit_retry_s,
        stall_s=settings.stall_s,
        limit_warn_percent=settings.limit_warn_percent,
        subtask_command=mcp_command(),
        mcp_wanted=mcp_wanted,
        subtask_env=subtask_env(settings),
        owner_tools=settings.owner_tools,
        private_dir=private_dir(settings),
        agent_nice=settings.agent_nice,
        preamble=settings.preamble_file,
        read_denial=denial.paths if denial is not None else None,
        git=GitGuard(denial.paths if denial is not None else tuple, warm=True),
    )


def host_presence(
    settings: Settings, role: ProcessRole, engines: Engines, pool: JobPool
) -> Presence:
    """What this process's heartbeat announces of its host (a front runs no turns)."""
    projects = tuple((name, str(path)) for name, path in settings.projects)
    if role is ProcessRole.FRONT:
        return Presence(projects=projects)
    return Presence(
        engines.presence(),
        settings.max_concurrent_turns,
        pool.free_slots,
        projects,
        engines.windows(),
    )


def stable_identity(role: ProcessRole, name: str, host: str) -> str:
    """The name a process keeps across restarts (its agents' tag is made from it)."""
    return f"detach-worker-{host}-{name}" if role is ProcessRole.WORKER else f"detach-{host}"


def listen_dsn(settings: Settings) -> str:
    """The shared database's URL as a plain PostgreSQL DSN (for the LISTEN connection)."""
    url = sa.engine.make_url(settings.resolved_database_url).set(drivername="postgresql")
    return url.render_as_string(hide_password=False)


def process_tag(settings: Settings, identity: str) -> str:
    """This process's prefix of the tag its agent processes carry: one per database and
    process identity, so two bots on one machine never stop each other's agents."""
    key = f"{settings.resolved_database_url}|{identity}".encode()
    return hashlib.sha256(key).hexdigest()[:16]


async def start_core(core: Core, stack: contextlib.AsyncExitStack) -> None:
    """Stop what a crashed run of this process left behind (agents, their daemons), start the
    agents' watchdog (if this process dies, it stops every agent process it started), recover
    its turns, then start the job pool (and, on a shared database, the lease's loop and the
    claiming of turns). On the way out: no more claims, the running turns stop, the lease
    lapses at once so another process takes over what they leave."""
    await asyncio.to_thread(kill_tagged, core.tag + ":")
    # what Codex's sandbox left that no tag names (executors.orphans)
    roots = (*core.workdirs.allowed, core.worktrees.root)
    await orphans.sweep_stale(roots)
    shared = core.shared
    if shared is None or shared.dispatcher is not None:  # it runs agents (a front does not)
        watchdog = Watchdog.start(this_run())
        stack.callback(watchdog.close)  # after the pool stopped the agents (SIGINT first)
    if shared is None:
        await recover(core.store, core.notifier, core.desk)
    else:
        await shared.lease.open()
        stack.push_async_callback(shared.lease.close)
        await shared.fleet.recover_earlier()
    await stack.enter_async_context(core.pool.serve(core.runner.run_turn))
    if shared is not None:
        background(stack, shared.fleet.run_forever, "fleet")
        if shared.dispatcher is not None:
            background(stack, shared.dispatcher.run_forever, "dispatch")


def background(
    stack: contextlib.AsyncExitStack, run: Callable[[], Awaitable[None]], name: str
) -> asyncio.Task[None]:
    """A loop owned by ``stack``: cancelled (and awaited) when it closes."""
    task = asyncio.ensure_future(run())
    task.set_name(name)

    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    stack.push_async_callback(stop)
    return task


def freeze_what_started() -> None:
    """What the start built and keeps (the store's compiled statements, in the bot its
    Telegram types and routers) frozen like the imports' objects (``bot.cli``): collections
    during turns no longer walk them (measured in the bot: a middle generation's took 2-4 ms
    and a full one 18 ms on the loop before, with the loop's other work waiting). Once, its
    garbage collected first."""
    gc.collect()
    gc.freeze()
