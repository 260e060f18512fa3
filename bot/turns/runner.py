"""One turn of a task: claim it, run the engine, keep the transcript, run its check, and hand
the outcome to ``bot.turns.finish`` (or park it at its engine's usage limit). A failing turn
never kills the pool: its failure is recorded as the turn's outcome."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, replace
from typing import Protocol

from bot.approvals.desk import ApprovalDesk
from bot.engines import Engines
from bot.errors import TurnTaken
from bot.models import (
    ApprovalMode,
    CheckResult,
    Preset,
    Task,
    TaskStatus,
    Turn,
    TurnError,
)
from bot.money.desk import MoneyDesk
from bot.money.pricing import Meter
from bot.ports import CheckRunner, TaskWorktrees
from bot.store import Store, TurnOutcome
from bot.telegram.notifier import Notifier
from bot.turns.agents import AgentSlots
from bot.turns.baseline import Baseline, prepare, recorded
from bot.turns.checking import TurnCheck
from bot.turns.drive import Drive, Driven
from bot.turns.finish import TurnFinisher
from bot.turns.limits import Parking
from bot.turns.openings import Openings
from bot.turns.outcome import charged, failure
from bot.turns.pool import Claimed, StopReason, TurnControl
from bot.turns.queue import TurnQueue
from bot.turns.specs import TurnPolicy, TurnSpecs
from bot.turns.steering import SteerBoard
from bot.turns.stops import RemoteStops
from bot.turns.transcript import prompted
from bot.workdirs import WorkdirPolicy

log = logging.getLogger(__name__)

# stops after which a turn writes nothing: left running for recovery at the next start
# (shutdown), or another process's turn now (taken over); None: the pool itself went away
HANDS_OFF = (None, StopReason.SHUTDOWN, StopReason.TAKEN_OVER)
CHECK_TAG = ":check"  # a check's tag: its turn's, and this (the startup sweep's prefix still holds)
JAIL_AHEAD_AFTER_S = 1.0  # a baseline jail started ahead waits for the card to be sent


class RunnerIdentity(Protocol):
    """Which runner this process is now (``bot.fleet.lease.Lease``, or a fixed name)."""

    @property
    def runner_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class TurnRun:
    """One claimed turn as it runs here: who holds it (``runner``), how it is stopped, its
    preset, what its spend is priced by (``meter``) and its task's budget ``left``."""

    task: Task
    turn: Turn
    control: TurnControl
    runner: str | None
    preset: Preset | None
    meter: Meter
    left: float | None


@dataclass(slots=True)
class _Progress:
    """How far a turn got: what a failure or a stop on the way is recorded with."""

    denials: tuple[str, ...] = ()
    before: Baseline | None = None  # the repository as the turn found it
    reported: bool = False  # the outcome and its card are committed; the agent may still exit


class TurnRunner:
    def __init__(
        self,
        *,
        store: Store,
        engines: Engines,
        notifier: Notifier,
        queue: TurnQueue,
        desk: ApprovalDesk,
        money: MoneyDesk,
        policy: TurnPolicy,
        workdirs: WorkdirPolicy | None = None,
        identity: RunnerIdentity | None = None,
        stop_poll_s: float | None = None,
        process_tag: str | None = None,
        checks: CheckRunner | None = None,
        worktrees: TaskWorktrees | None = None,
    ) -> None:
        """``identity``: which runner this process is now (its lease on a shared database; it
        changes when another process took this one's turns over); a turn's writes are this
        runner's only while it holds the turn. ``stop_poll_s``: how often a running turn looks
        for a /cancel handled by another process (scale-out); None in a single process, where
        the pool cancels directly.
        ``process_tag``: this process's prefix of the tag every agent process carries
        (``<prefix>:<turn id>.<run>``).
        ``checks`` runs a task's check after each of its turns; ``worktrees``: a task's own
        worktree, cut again before a turn after a Merge or Discard, asked for the card's
        Merge and Discard. ``openings``: the first baselines read as their tasks were created
        (given to ``TaskCreator`` by the composition root, which closes it)."""
        self._store = store
        self._notifier = notifier
        self._queue = queue
        self._money = money
        self._policy = policy
        self._identity = identity
        self._stops = RemoteStops(store, stop_poll_s)
        self._check = TurnCheck(store, desk, checks)
        self._finisher = TurnFinisher(
            store=store,
            notifier=notifier,
            desk=desk,
            money=money,
            check_rounds=policy.check_rounds,
            git=policy.git,
            worktrees=worktrees,
        )
        self._agents = AgentSlots()  # one agent process of a task at a time
        self.openings = Openings(policy.git)
        self._specs = TurnSpecs(store, money, policy, workdirs, process_tag, worktrees=worktrees)
        self._drive = Drive(
            store=store,
            engines=engines,
            notifier=notifier,
            desk=desk,
            progress_interval_s=policy.progress_interval_s,
            progress_delay_s=policy.progress_delay_s,
            shared=stop_poll_s is not None,
            stall_s=policy.stall_s,
            warn_percent=policy.limit_warn_percent,
            timezone=policy.timezone,
            steering=SteerBoard(),
            git=policy.git,
        )
        self.steering = self._drive.steering  # the inboxes of the turns running here
        self._parking = Parking(
            store=store,
            queue=queue,
            notifier=notifier,
            engines=engines.available,
            retry_s=policy.limit_retry_s,
            timezone=policy.timezone,
        )

    @property
    def runner_id(self) -> str | None:
        return self._identity.runner_id if self._identity is not None else None

    async def run_turn(
        self, turn_id: int, control: TurnControl, claimed: Claimed | None = None
    ) -> None:
        """One turn: claimed here by id, or already ``claimed`` from the shared queue. Its
        writes are those of the runner that claimed it, while that runner holds it."""
        if claimed is None:
            claimed = await self._store.claims.claim_turn(turn_id, self.runner_id)
        if claimed is None:
            log.info("turn %s: not claimable (already run, cancelled or behind another)", turn_id)
            return
        task, turn = claimed
        try:
            await self._run_claimed(task, turn, control, turn.runner)
        except TurnTaken:
            log.warning(
                "task %s turn %s: taken over by another process; left alone", task.id, turn.id
            )
        finally:
            self._check.drop(task.id)  # a check question still open with no turn: a no

    async def _run_claimed(
        self, task: Task, turn: Turn, control: TurnControl, runner: str | None
    ) -> None:
        created = self._queue.created_running(turn.id)  # claimed as its task was created
        if not await self._may_start(task, turn, runner, created):
            return
        refusal = await self._specs.refusal(task, created)
        if refusal is not None:
            await self._finisher.finish(task, turn, refusal, (), runner=runner)
            await self._queue.kick(task.id)
            return
        preset = self._money.catalog.get(task.preset)
        meter = self._money.meter(task.engine, preset)  # priced as the model the engine names
        run = TurnRun(task, turn, control, runner, preset, meter, self._money.budget_left(task))
        progress = _Progress()
        try:
            await self._attempt(run, progress)
        except asyncio.CancelledError:
            if progress.reported or control.reason in HANDS_OFF:
                raise  # recovered as `interrupted` at the next start, or another process's now
            await self._stopped(run, progress, control.reason)
            raise
        except TurnTaken:
            raise
        except Exception as exc:
            if progress.reported:  # the agent's exit after its answer went wrong: nothing to report
                log.exception("task %s turn %s: stopping the agent failed", task.id, turn.id)
            else:
                outcome = charged(failure(task, turn, exc), meter)
                await self._finish_early(run, progress, outcome)
        await self._queue.kick(task.id)
        # the next turn's baseline: its jail ahead, once this turn's card is on its way
        await prepare(self._policy.git, task.cwd, after_s=JAIL_AHEAD_AFTER_S)

    async def _may_start(self, task: Task, turn: Turn, runner: str | None, created: bool) -> bool:
        """False when the turn's engine is at its usage limit (the turn is parked); else the
        chat is told the turn started (and that a wait is over, the first time). ``created``:
        a new task's first turn, claimed at its creation."""
        until = await self._queue.limited_until(task.engine)
        if until is not None:  # submitted before its engine's limit was known: it waits too
            await self._parking.park(task, turn, until, runner)
            return False
        if turn.parked_at is not None:  # a wait is over: said once, the first time
            await self._notifier.limit_over(task, task.engine.capitalize(), turn.limit_parks <= 1)
        # its follow-up's and limit's notes follow; a new task's first turn, claimed as it
        # was created, has none (a follow-up sent since is queued behind it, and says so: a
        # store read and commit saved before the agent's spawn)
        if not created:
            await self._notifier.turn_started(task)
        log.info("task %s turn %s: running (%s)", task.id, turn.id, task.engine)
        return True

    async def _attempt(self, run: TurnRun, progress: _Progress) -> None:
        """The agent's run, then its check, then the report; ``progress`` keeps what a
        failure or a stop on the way still needs."""
        task, turn = run.task, run.turn
        await self._check.ask_early(task, turn.id)  # the owner answers while it works
        async with self._agents.one(task.id), contextlib.AsyncExitStack() as agent:
            # what was there is not the turn's doing: read before any process of the agent
            # exists (its CLI runs hooks and git at start); the agent's git gets the same scope
            spec, (before, scope) = await asyncio.gather(
                self._specs.spec(task, turn, run.preset, run.left),
                self.openings.open(turn.id, task.cwd),
            )
            progress.before = before
            if scope is not None:
                sandboxed = spec.approval_mode is ApprovalMode.SANDBOX
                spec = replace(spec, git_env=tuple(scope.cli_env(sandboxed).items()))
            # the turn's first transcript lines are written while the agent's process starts
            started = asyncio.ensure_future(self._started(run, before))
            agent.push_async_callback(_settled, started)

            async def ready() -> None:
                await asyncio.shield(started)

            with run.control.running(), self._stops.watching(turn.id, run.runner, run.control):
                await run.control.starting()  # after the turns that got their slots first
                driven = await self._drive.drive(
                    task, turn, spec, run.meter, run.left, agent, run.runner, ready
                )
                await ready()  # an agent that ended before its prompt: the turn's start kept
                progress.denials = driven.denials
                # the check's processes carry a tag of their own: the sweep after it must
                # not find the agent, which may still be exiting (closing its MCP servers)
                check_tag = f"{spec.process_tag}{CHECK_TAG}" if spec.process_tag else None
                check = await self._check.after(task, turn, driven.outcome, check_tag)
            # The answer is reported while the agent exits after it (tens of ms for
            # Claude); the block ends once it did, and only then may the next turn start.
            await self._report(run, driven, check, before)
            progress.reported = True

    async def _started(self, run: TurnRun, before: Baseline) -> None:
        """The turn's first transcript lines (its baseline's record, its prompt): what the
        agent's prompt waits for."""
        start = await recorded(before, run.turn.seq, self._policy.secrets)
        start += prompted(run.turn.seq, run.turn.prompt)
        await self._store.transcript.append(run.task.id, run.turn.id, start)

    async def _report(
        self, run: TurnRun, driven: Driven, check: CheckResult | None, before: Baseline
    ) -> None:
        """A turn that hit its engine's usage limit is parked; any other is finished."""
        outcome = driven.outcome
        if outcome.status is TaskStatus.WAITING_FOR_LIMIT:
            await self._parking.park(run.task, run.turn, outcome.resume_at, run.runner)
            return
        # only reading tools (or none) and no check: nothing changed, no git to ask
        changed = driven.acted or check is not None
        await self._finisher.finish(
            run.task,
            run.turn,
            outcome,
            driven.denials,
            check,
            run.runner,
            before if changed else None,
        )

    async def _stopped(self, run: TurnRun, progress: _Progress, reason: StopReason) -> None:
        """A turn stopped here for ``reason`` (cancelled, timed out): recorded as such, and the
        task's next turn kicked."""
        outcome = charged(
            TurnOutcome(
                status=TaskStatus(reason.value), error=TurnError(f"turn_error.{reason.value}")
            ),
            run.meter,
        )
        await self._finish_early(run, progress, outcome)
        await self._queue.kick(run.task.id)

    async def _finish_early(self, run: TurnRun, progress: _Progress, outcome: TurnOutcome) -> None:
        """A turn that ended before its report: ``outcome``, with what it got to."""
        await self._finisher.finish(
            run.task,
            run.turn,
            outcome,
            progress.denials,
            runner=run.runner,
            before=progress.before,
        )


async def _settled(started: asyncio.Future[None]) -> None:
    """A turn's start that its agent never waited for (it failed first) is still kept in its
    transcript; a cancelled turn's is stopped."""
    running = asyncio.current_task()
    if not started.done() and running is not None and running.cancelling():
        started.cancel()
    await asyncio.gather(started, return_exceptions=True)
