"""The use cases every door calls, assembled once from the core's parts (``bot.app`` calls
``make_use_cases``): each is given its own collaborators, none the bundle."""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Mapping

from bot.core import Core
from bot.errors import ConfigError
from bot.models import Phrase, ProcessRole
from bot.ports import Executor
from bot.preflight.call import ClaudePreflight
from bot.preflight.check import Asker, Preflight
from bot.preflight.desk import PreflightDesk
from bot.preflight.gate import PreflightGate, preflight_preset
from bot.preflight.local_call import LocalPreflight
from bot.settings import Settings
from bot.tasks.adoption import Adoption
from bot.tasks.cancel import Cancellation
from bot.tasks.card import TaskCard
from bot.tasks.chat import ChatSettings
from bot.tasks.creation import TaskCreator
from bot.tasks.followup import FollowUps
from bot.tasks.handover import Handover
from bot.tasks.heldanswer import HeldAnswers
from bot.tasks.lifecycle import TaskLifecycle
from bot.tasks.lookup import TaskLookup
from bot.tasks.nextturn import NextTurns
from bot.tasks.placing import Placement
from bot.tasks.planning import TaskDefaults, TaskPlanner
from bot.tasks.preflighting import PreflightStep
from bot.tasks.requests import TaskRequests
from bot.tasks.routing import TaskRouter
from bot.tasks.steering import SteerDesk
from bot.tasks.terminal import TerminalDesk
from bot.tasks.usecases import UseCases
from bot.tasks.worktree import WorktreeCard
from bot.telegram.held import HeldFiles
from bot.worktrees.revival import Revival
from executors import registry
from executors.process import agent_env


def make_use_cases(
    core: Core, settings: Settings, environ: Mapping[str, str] | None = None
) -> UseCases:
    """The use cases every door calls, each given its own collaborators: the parts listed."""
    planner = make_planner(core, settings)
    defaults, engines = planner.defaults, planner.engines
    store, notifier, texts, money = core.store, core.notifier, core.texts, core.money
    lookup = TaskLookup(store, texts)  # somebody else's task is reported as missing
    turns = NextTurns(store, notifier, core.queue.kick, defaults.timezone, planner.placement)
    creator = TaskCreator(
        store=store,
        queue=core.queue,
        notifier=notifier,
        money=money,
        worktrees=core.worktrees,
        engines=engines,
        openings=core.runner.openings,
    )
    gate = make_preflight(core, settings, engines, environ)
    step = (
        PreflightStep(
            gate,
            router=TaskRouter(core.queue, defaults),
            start=creator.start,
            plan=planner.plan,
            lookup=lookup,
            money=money,
            engines=engines,
            store=store,
            kept=defaults.attachments_staging.parent / "preflight",  # held tasks' files
        )
        if gate is not None
        else None
    )
    steering = SteerDesk(
        store,
        core.runner.steering,
        notifier,
        default=settings.reply_default,
        choice_s=settings.reply_choice_s,
        local=core.pool.local,
    )
    follow_ups = FollowUps(
        store=store,
        turns=turns,
        notifier=notifier,
        money=money,
        validate=planner.validate_prompt,
        steering=steering,
        running=core.pool.is_running,
        reopen=core.worktrees.reopen,
    )
    chat = ChatSettings(
        store=store,
        policies=notifier.policies,
        queue=core.queue,
        workdirs=core.workdirs,
        current_dir=planner.current_dir,
        engines=engines,
        timezone=defaults.timezone,
        placement=planner.placement,
    )
    create = TaskRequests(planner=planner, creator=creator, lookup=lookup, step=step, store=store)
    held_files = HeldFiles(defaults.attachments_staging.parent / "held")
    return UseCases(
        create=create,
        follow_up=follow_ups,
        lookup=lookup,
        lifecycle=TaskLifecycle(
            lookup=lookup,
            turns=turns,
            money=money,
            cancellation=Cancellation(
                lookup=lookup,
                store=store,
                notifier=notifier,
                texts=texts,
                stop_here=core.pool.cancel,
                takeover=core.shared.takeover if core.shared else None,
            ),
            store=store,
            notifier=notifier,
            texts=texts,
        ),
        card=TaskCard(
            lookup=lookup,
            turns=turns,
            money=money,
            worktrees=core.worktrees,
            store=store,
            notifier=notifier,
            texts=texts,
        ),
        worktree_card=WorktreeCard(
            lookup=lookup,
            worktrees=core.worktrees,
            notifier=notifier,
            texts=texts,
            redact=store.redact,
        ),
        handover=Handover(
            lookup=lookup,
            chat=chat,
            money=money,
            engines=engines,
            store=store,
            queue=core.queue,
            notifier=notifier,
            texts=texts,
            git=core.worktrees.guard,
        ),
        terminal=TerminalDesk(
            lookup=lookup,
            turns=turns,
            chat=chat,
            follow_ups=follow_ups,
            store=store,
            notifier=notifier,
            texts=texts,
            worktrees=Revival(core.worktrees, notifier, texts),
        ),
        adoption=Adoption(
            workdirs=core.workdirs,
            engines=engines,
            session_mode=defaults.session_mode,
            store=store,
            notifier=notifier,
            environ=os.environ if environ is None else environ,
            owners=settings.owners,
            prices=money.prices,
        ),
        chat=chat,
        money_desk=money,
        held_files=held_files,
        held_answers=HeldAnswers(
            held_files=held_files, create=create, follow_up=follow_ups, lookup=lookup
        ),
        preflight=step,
        steering=steering,
    )


def make_preflight(
    core: Core,
    settings: Settings,
    engines: Collection[str],
    environ: Mapping[str, str] | None,
) -> PreflightGate | None:
    """The preflight of walk-away tasks: its model (DETACH_PREFLIGHT_MODEL, a Claude preset
    through the claude CLI, or a /local preset through its endpoint); None when no Claude
    preset is known here and nothing asks for a preflight."""
    preset = preflight_preset(core.money.catalog.all(), settings.preflight_model)
    wanted = settings.preflight or settings.preflight_model or settings.default_engine == "auto"
    if preset is None or preset.engine not in ("claude", "local"):
        if wanted:
            raise ConfigError(
                f"DETACH_PREFLIGHT_MODEL {settings.preflight_model!r}: "
                "not a Claude or /local preset"
            )
        return None
    env = agent_env(os.environ if environ is None else environ, settings.secret_values())
    asker: Asker
    if preset.engine == "local":
        asker = LocalPreflight(
            os.environ if environ is None else environ,
            settings.local_base_url,
            settings.local_api_key_env,
            lambda p: p if p.priced else core.money.counted_as(p.engine),
        )
    else:
        asker = ClaudePreflight(settings.claude_bin, env)
    return PreflightGate(
        Preflight(asker, preset),
        enabled=settings.preflight,
        money=core.money,
        store=core.store,
        texts=core.texts,
        engines=engines,
        desk=PreflightDesk(
            core.store,
            core.outbox,
            core.texts,
            settings.preflight_wait_s,
            core.notifier.policies,
        ),
        route_grace_s=settings.preflight_route_grace_s,
    )


def make_planner(core: Core, settings: Settings) -> TaskPlanner:
    # a front bot accepts every engine (its workers have the CLIs)
    engines = (
        set(registry.names())
        if settings.role is ProcessRole.FRONT
        else core.engines.available.keys()
    )
    return TaskPlanner(
        store=core.store,
        texts=core.texts,
        money=core.money,
        workdirs=core.workdirs,
        worktrees=core.worktrees,
        engines=engines,
        defaults=TaskDefaults.of(
            settings, functools.partial(sandbox_problem, core.engines.available)
        ),
        placement=Placement(core.store, dict(settings.projects), core.shared is not None),
    )


def sandbox_problem(executors: Mapping[str, Executor], engine: str) -> Phrase | None:
    """Why ``engine`` cannot run sandboxed here; None where it can, or where it runs elsewhere
    (a front bot: its workers' CLIs refuse a sandbox they do not have)."""
    executor = executors.get(engine)
    return executor.sandbox_problem() if executor is not None else None
