"""A turn's agent, from its spec to its verdict: the engine's events (transcript, progress,
the session id, a budget that stops it mid-turn, a usage limit), and a session that cannot be
resumed here carried on in a new one."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bot.approvals.desk import ApprovalDesk
from bot.engines import Engines
from bot.errors import AgentCrashed, AgentNotInstalled, SessionNotFound
from bot.events import (
    LimitReached,
    SessionStarted,
    ToolCalled,
    TurnFinished,
    UsageUpdated,
    WindowReported,
)
from bot.models import MessageKind, Task, TaskStatus, Turn, TurnError, TurnSpec
from bot.money.pricing import Meter
from bot.store import Store, TurnOutcome
from bot.telegram.notifier import Notifier
from bot.turns.continuation import lost_session_prompt
from bot.turns.outcome import charged, outcome_of, reaper, transcript_entry
from bot.turns.progress import Progress
from bot.turns.stall import StallWatch
from bot.turns.transcribe import TranscriptBatch
from bot.turns.windows import UsageWarnings

log = logging.getLogger(__name__)
TRANSCRIPT_BATCH = 25


@dataclass(frozen=True, slots=True)
class Driven:
    """What a turn's agent came to: its outcome, the tools it was denied, and whether it
    called any tool that may change files (an agent that called none, or only tools that
    read, changed no file)."""

    outcome: TurnOutcome
    denials: tuple[str, ...] = ()
    acted: bool = True


class Drive:
    def __init__(
        self,
        *,
        store: Store,
        engines: Engines,
        notifier: Notifier,
        desk: ApprovalDesk,
        progress_interval_s: float,
        progress_delay_s: float,
        shared: bool,
        secrets: tuple[str, ...] = (),
        stall_s: float = 600.0,
        warn_percent: float = 80.0,
        timezone: str = "UTC",
    ) -> None:
        """``shared``: turns run on a shared database, where another process may take one
        over (its progress is then neither sent nor edited). ``stall_s``: an agent quiet this
        long gets its turn one watchdog message; ``warn_percent``: a usage window past this
        share is told once; ``timezone``: for owners who set no /tz."""
        self._stall_s = stall_s
        self._warnings = UsageWarnings(store, notifier, warn_percent, timezone)
        self._store = store
        self._secrets = secrets
        self._engines = engines
        self._notifier = notifier
        self._desk = desk
        self._progress_interval_s = progress_interval_s
        self._progress_delay_s = progress_delay_s
        self._shared = shared

    async def drive(
        self,
        task: Task,
        turn: Turn,
        spec: TurnSpec,
        meter: Meter,
        left: float | None,
        agent: contextlib.AsyncExitStack,
        runner: str | None,
    ) -> Driven:
        """``meter`` prices the turn (and keeps the tokens it used, for an outcome without a
        verdict); ``left``: what the task's budget has left. The turn's stall watchdog lives
        until its agent has exited (``agent``'s end)."""
        watch = StallWatch(
            notifier=self._notifier,
            stalls=self._desk.stalls,
            task=task,
            turn_id=spec.turn_id,
            after_s=self._stall_s,
            asking=functools.partial(self._desk.asking, task.id),
        )
        watch.start()
        agent.push_async_callback(watch.close)
        try:
            return await self._events(task, spec, meter, left, agent, runner, watch)
        except SessionNotFound:
            spec = await self._anew(task, turn, spec)
            return await self._events(task, spec, meter, left, agent, runner, watch)

    async def _anew(self, task: Task, turn: Turn, spec: TurnSpec) -> TurnSpec:
        """The session to resume is not here (a scale-out worker on another machine ran it,
        or its agent was killed before it saved it): the turn goes on in a new session whose
        prompt tells what happened so far; one quiet line says so."""
        log.warning(
            "task %s: session %s not found here; a new session", task.id, spec.resume_session_id
        )
        await self._store.tasks.set_session(task.id, None)
        await self._notifier.send(
            task,
            self._notifier.text(task.locale, "task.session_lost", label=task.label),
            MessageKind.STATUS,
        )
        prompt = await lost_session_prompt(self._store, task, turn)
        return dataclasses.replace(spec, prompt=prompt, resume_session_id=None)

    def _held(self, turn_id: int, runner: str | None) -> Callable[[], Awaitable[bool]] | None:
        """On a shared database: whether ``runner`` still runs the turn (else always)."""
        if not self._shared or runner is None:
            return None
        return functools.partial(self._store.claims.holds, turn_id, runner)

    async def _events(
        self,
        task: Task,
        spec: TurnSpec,
        meter: Meter,
        left: float | None,
        agent: contextlib.AsyncExitStack,
        runner: str | None,
        watch: StallWatch,
    ) -> Driven:
        """The agent's events up to its verdict. The agent's process belongs to ``agent``: on a
        verdict it is left to exit on its own when that block ends (after the card); on
        anything else (a budget stop, an error, a cancel) it is stopped."""
        await self._engines.ready()  # a turn right after start: the probes may still run
        executor = self._engines.available.get(task.engine)
        if executor is None:
            raise AgentNotInstalled(task.engine, None)
        events = executor.run(spec, self._desk.for_turn(task, spec.turn_id))
        agent.push_async_exit(reaper(events))
        agent.callback(watch.exiting)  # first at the end: the agent's exit is what is awaited
        final: TurnFinished | None = None
        limit: LimitReached | None = None
        acted = False
        progress = Progress(
            self._notifier,
            task,
            self._progress_interval_s,
            meter,
            self._progress_delay_s,
            self._held(spec.turn_id, runner),
            functools.partial(self._desk.asking, task.id),
        )
        transcript = TranscriptBatch(
            self._store, task.id, spec.turn_id, TRANSCRIPT_BATCH, secrets=self._secrets
        )
        async with progress, transcript:
            async for event in events:
                meter.observe(event)
                progress.observe(event)
                watch.observe(event)
                if isinstance(event, WindowReported):
                    await self._warnings.reported(task, event)
                acted = acted or (isinstance(event, ToolCalled) and not event.reads_only)
                if isinstance(event, SessionStarted) and event.session_id != task.session_id:
                    await self._store.tasks.set_session(task.id, event.session_id)
                await transcript.add(transcript_entry(event))
                if isinstance(event, LimitReached) and (limit is None or not limit.resets_at):
                    limit = event  # the first that names its reset time wins
                if isinstance(event, TurnFinished):
                    log.debug("task %s turn %s: verdict read", task.id, spec.turn_id)
                    final = event
                    break
                if isinstance(event, UsageUpdated) and _over(meter, left):
                    log.info("task %s: budget reached mid-turn; stopping the agent", task.id)
                    await events.aclose()
                    return Driven(
                        charged(
                            TurnOutcome(
                                TaskStatus.BUDGET_EXCEEDED,
                                error=TurnError("turn_error.budget_reached"),
                            ),
                            meter,
                        )
                    )
        if final is None:  # executors end with TurnFinished or raise
            raise AgentCrashed("the agent ended without a result", None, "")
        outcome = outcome_of(final, meter)
        if limit is not None and final.is_error:
            outcome = await self._limited(task, outcome, limit)
        return Driven(outcome, final.denials, acted)

    async def _limited(self, task: Task, outcome: TurnOutcome, limit: LimitReached) -> TurnOutcome:
        """A turn the engine's usage limit stopped is not a failure: it waits for the reset
        (``resume_at``; None when the engine named none: it is tried again after a while)."""
        log.info("task %s: %s usage limit; resets %s", task.id, task.engine, limit.resets_at)
        return TurnOutcome(TaskStatus.WAITING_FOR_LIMIT, resume_at=limit.resets_at)


def _over(meter: Meter, left: float | None) -> bool:
    """The tokens used so far cost more than the budget has left (an unpriced model's
    included, at the price it is counted at)."""
    cost = meter.charge().cost_usd
    return left is not None and cost is not None and cost > left
