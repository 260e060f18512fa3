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
    SteerDeferred,
    ToolCalled,
    TurnFinished,
    UsageUpdated,
    WindowReported,
)
from bot.models import MessageKind, Phrase, Task, TaskStatus, Turn, TurnError, TurnSpec
from bot.money.pricing import Meter
from bot.ports import NOW, Ready
from bot.store import Store, TurnOutcome
from bot.telegram.notifier import Notifier
from bot.turns.card_jail import CardJail
from bot.turns.continuation import lost_session_prompt
from bot.turns.outcome import charged, outcome_of, reaper, transcript_entry
from bot.turns.progress import Progress
from bot.turns.stall import StallWatch
from bot.turns.steer_notes import SteerNotes
from bot.turns.steering import SteerBoard, SteerBox
from bot.turns.transcribe import TranscriptBatch
from bot.turns.windows import UsageWarnings
from executors.gitguard import GitGuard

log = logging.getLogger(__name__)
TRANSCRIPT_BATCH = 25


@dataclass(frozen=True, slots=True)
class Leg:
    """One run of a turn through its agent: what its events are read with (``spec`` is
    replaced when the session to resume is gone and the turn goes on in a new one)."""

    task: Task
    spec: TurnSpec
    meter: Meter
    left: float | None  # what the task's budget has left
    agent: contextlib.AsyncExitStack  # the agent's process belongs to it
    runner: str | None  # on a shared database, who runs the turn
    watch: StallWatch
    ready: Ready = NOW  # awaited before the agent gets its prompt (its first lines written)


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
        stall_s: float = 600.0,
        warn_percent: float = 80.0,
        timezone: str = "UTC",
        steering: SteerBoard | None = None,
        git: GitGuard | None = None,
    ) -> None:
        """``shared``: turns run on a shared database, where another process may take one
        over (its progress is then neither sent nor edited). ``stall_s``: an agent quiet this
        long gets its turn one watchdog message; ``warn_percent``: a usage window past this
        share is told once; ``timezone``: for owners who set no /tz. ``steering``: the inboxes
        of the turns running here (a follow-up sent into the running turn)."""
        self.steering = steering or SteerBoard()
        self._git = git or GitGuard()
        self._stall_s = stall_s
        self._warnings = UsageWarnings(store, notifier, warn_percent, timezone)
        self._store = store
        self._engines = engines
        self._notifier = notifier
        self._desk = desk
        self._progress_interval_s = progress_interval_s
        self._progress_delay_s = progress_delay_s
        self._shared = shared
        self._notes = SteerNotes(store, notifier)

    async def drive(
        self,
        task: Task,
        turn: Turn,
        spec: TurnSpec,
        meter: Meter,
        left: float | None,
        agent: contextlib.AsyncExitStack,
        runner: str | None,
        ready: Ready = NOW,
    ) -> Driven:
        """``meter`` prices the turn (and keeps the tokens it used, for an outcome without a
        verdict); ``left``: what the task's budget has left. The turn's stall watchdog lives
        until its agent has exited (``agent``'s end). ``ready``: what the agent's prompt
        waits for while its process starts (``Executor.run``; awaited again, it returns)."""
        watch = StallWatch(
            notifier=self._notifier,
            store=self._store,
            task=task,
            turn_id=spec.turn_id,
            after_s=self._stall_s,
            asking=functools.partial(self._desk.asking, task.id),
        )
        watch.start()
        agent.push_async_callback(watch.close)
        leg = Leg(task, spec, meter, left, agent, runner, watch, ready)
        try:
            return await self._events(leg)
        except SessionNotFound:  # (Codex says so before its prompt: the lines so far first)
            await ready()
            spec = await self._anew(task, turn, spec)
            return await self._events(dataclasses.replace(leg, spec=spec))

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
        prompt = await lost_session_prompt(self._store, self._git, task, turn)
        return dataclasses.replace(spec, prompt=prompt, resume_session_id=None)

    def _held(self, turn_id: int, runner: str | None) -> Callable[[], Awaitable[bool]] | None:
        """On a shared database: whether ``runner`` still runs the turn (else always)."""
        if not self._shared or runner is None:
            return None
        return functools.partial(self._store.claims.holds, turn_id, runner)

    async def _events(self, leg: Leg) -> Driven:
        """The agent's events up to its verdict. The agent's process belongs to ``leg.agent``:
        on a verdict it is left to exit on its own when that block ends (after the card); on
        anything else (a budget stop, an error, a cancel) it is stopped."""
        await self._engines.ready()  # a turn right after start: the probes may still run
        with self.steering.open(leg.task.id, leg.spec.turn_id) as inbox:
            driven = await self._read(leg, inbox)
            for steer_id in inbox.close():  # never taken in: it runs as its own next turn
                await self._notes.note(leg.task, SteerDeferred(steer_id), 0)
        return driven

    async def _read(self, leg: Leg, inbox: SteerBox) -> Driven:
        task, spec, meter, left, agent, watch = (
            leg.task, leg.spec, leg.meter, leg.left, leg.agent, leg.watch
        )  # fmt: skip
        executor = self._engines.available.get(task.engine)
        if executor is None:
            raise AgentNotInstalled(task.engine, None)
        approver = self._desk.for_turn(task, spec.turn_id)
        jail = CardJail(self._git, task.cwd, agent)
        events = executor.run(spec, approver, inbox, ready=leg.ready)
        agent.push_async_exit(reaper(events))
        agent.callback(watch.exiting)  # first at the end: the agent's exit is what is awaited
        final: TurnFinished | None = None
        limit: LimitReached | None = None
        acted = False
        steps = 0  # the tool calls so far: a steer taken in now reaches the model's next step
        progress = self._progress(leg)
        transcript = TranscriptBatch(self._store, task.id, spec.turn_id, TRANSCRIPT_BATCH)
        async with progress, transcript:
            async for event in events:
                meter.observe(event)
                progress.observe(event)
                watch.observe(event)
                await self._recorded(task, event)
                jail.start()  # the agent is up (its start-up is not slowed by the jail's)
                acted = acted or (isinstance(event, ToolCalled) and not event.reads_only)
                steps += isinstance(event, ToolCalled)
                if not await self._notes.steered(task, event, inbox, steps + 1, transcript):
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
                    return _budget_reached(meter)
        if final is None:  # executors end with TurnFinished or raise
            said = Phrase("agent.no_result", {"engine": task.engine})
            raise AgentCrashed("the agent ended without a result", None, "", said)
        outcome = outcome_of(final, meter)
        if limit is not None and final.is_error:
            outcome = await self._limited(task, outcome, limit)
        return Driven(outcome, final.denials, acted)

    def _progress(self, leg: Leg) -> Progress:
        """The turn's progress line: paced, and quiet while the turn waits on its owner."""
        return Progress(
            self._notifier,
            leg.task,
            self._progress_interval_s,
            leg.meter,
            delay_s=self._progress_delay_s,
            held=self._held(leg.spec.turn_id, leg.runner),
            asking=functools.partial(self._desk.asking, leg.task.id),
        )

    async def _recorded(self, task: Task, event: object) -> None:
        """What an event changes of the task: its session id, a usage window's warning."""
        if isinstance(event, WindowReported):
            self._engines.window_reported(task.engine, event.window, event.used, event.resets_at)
            await self._warnings.reported(task, event)
        if isinstance(event, SessionStarted) and event.session_id != task.session_id:
            await self._store.tasks.set_session(task.id, event.session_id)

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


def _budget_reached(meter: Meter) -> Driven:
    """A turn stopped mid-way at its budget: what it spent, and why it stopped."""
    stopped = TurnOutcome(TaskStatus.BUDGET_EXCEEDED, error=TurnError("turn_error.budget_reached"))
    return Driven(charged(stopped, meter))
