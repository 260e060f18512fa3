"""One turn of a task: claim it, run the engine, keep the transcript, record the outcome, report."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Protocol

from bot import failpoints
from bot.approvals.consent import CheckConsent
from bot.approvals.desk import ApprovalDesk
from bot.engines import Engines
from bot.errors import (
    TurnTaken,
)
from bot.models import (
    ApprovalMode,
    CheckResult,
    Task,
    TaskStatus,
    Turn,
    TurnError,
)
from bot.money.desk import MoneyDesk
from bot.ports import CheckRunner
from bot.store import Store, TurnOutcome
from bot.telegram.completion import CardAsk
from bot.telegram.notifier import Notifier
from bot.turns.baseline import Baseline, recorded, take, turn_changes
from bot.turns.drive import Drive
from bot.turns.limits import Parking
from bot.turns.outcome import (
    CHECK_PROMPT,
    CHECK_PROMPT_TAIL,
    charged,
    failure,
)
from bot.turns.pool import Claimed, StopReason, TurnControl
from bot.turns.queue import TurnQueue
from bot.turns.specs import TurnPolicy, TurnSpecs
from bot.turns.steering import SteerBoard
from bot.workdirs import WorkdirPolicy

log = logging.getLogger(__name__)

# stops after which a turn writes nothing: left running for recovery at the next start
# (shutdown), or another process's turn now (taken over); None: the pool itself went away
HANDS_OFF = (None, StopReason.SHUTDOWN, StopReason.TAKEN_OVER)
AGENT_EXIT_WAIT_S = 30.0  # a previous agent of the task still exiting (its stop is bounded)


class RunnerIdentity(Protocol):
    """Which runner this process is now (``bot.fleet.lease.Lease``, or a fixed name)."""

    @property
    def runner_id(self) -> str: ...


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
    ) -> None:
        """``identity``: which runner this process is now (its lease on a shared database; it
        changes when another process took this one's turns over); a turn's writes are this
        runner's only while it holds the turn. ``stop_poll_s``: how often a running turn looks
        for a /cancel handled by another process (scale-out); None in a single process, where
        the pool cancels directly.
        ``process_tag``: this process's prefix of the tag every agent process carries
        (``<prefix>:<turn id>.<run>``).
        ``checks`` runs a task's check after each of its turns."""
        self._store = store
        self._engines = engines
        self._notifier = notifier
        self._queue = queue
        self._desk = desk
        self._money = money
        self._policy = policy
        self._identity = identity
        self._stop_poll_s = stop_poll_s
        self._checks = checks
        self._consent = CheckConsent(store, desk)  # a repository's check waits for the owner
        self._agents: dict[int, asyncio.Future[None]] = {}  # task id -> its agent is gone
        self._specs = TurnSpecs(store, money, policy, workdirs, process_tag)
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
        )
        self.steering = self._drive.steering  # the inboxes of the turns running here
        self._parking = Parking(
            store, queue, notifier, engines.available, policy.limit_retry_s, policy.timezone
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
            self._consent.drop(task.id)  # a check question still open with no turn: a no

    async def _run_claimed(
        self, task: Task, turn: Turn, control: TurnControl, runner: str | None
    ) -> None:
        until = await self._queue.limited_until(task.engine)
        if until is not None:  # submitted before its engine's limit was known: it waits too
            await self._parking.park(task, turn, until, runner)
            return
        if turn.parked_at is not None:  # a wait is over: said once, the first time
            await self._notifier.limit_over(task, task.engine.capitalize(), turn.limit_parks <= 1)
        await self._notifier.turn_started(task)  # its follow-up's and limit's notes follow
        log.info("task %s turn %s: running (%s)", task.id, turn.id, task.engine)
        denials: tuple[str, ...] = ()
        check: CheckResult | None = None
        before: Baseline | None = None  # the repository as the turn found it
        refusal = await self._specs.refusal(task)
        if refusal is not None:
            await self._finish(task, turn, refusal, denials, runner=runner)
            await self._queue.kick(task.id)
            return
        preset = self._money.catalog.get(task.preset)
        meter = self._money.meter(task.engine, preset)  # priced as the model the engine names
        left = self._money.budget_left(task)
        reported = False  # the outcome and its card are committed; the agent may still exit
        try:
            await self._consent.ask_early(task, turn.id)  # the owner answers while it works
            spec = await self._specs.spec(task, turn, preset, left)
            async with self._one_agent(task.id), contextlib.AsyncExitStack() as agent:
                before = await take(task.cwd)  # what was there is not the turn's doing
                start = await recorded(before, turn.seq, self._policy.secrets)
                await self._store.transcript.append(task.id, turn.id, start)
                with control.running(), self._stops_from_elsewhere(turn.id, runner, control):
                    driven = await self._drive.drive(task, turn, spec, meter, left, agent, runner)
                    outcome, denials = driven.outcome, driven.denials
                    check = await self._check(task, turn, outcome, spec.process_tag)
                # The answer is reported while the agent exits after it (tens of ms for
                # Claude); the block ends once it did, and only then may the next turn start.
                if outcome.status is TaskStatus.WAITING_FOR_LIMIT:
                    await self._parking.park(task, turn, outcome.resume_at, runner)
                else:
                    # only reading tools (or none) and no check: nothing changed, no git to ask
                    changed = driven.acted or check is not None
                    await self._finish(
                        task, turn, outcome, denials, check, runner, before if changed else None
                    )
                reported = True
        except asyncio.CancelledError:
            if reported or control.reason in HANDS_OFF:
                raise  # recovered as `interrupted` at the next start, or another process's now
            outcome = charged(
                TurnOutcome(
                    status=TaskStatus(control.reason.value),
                    error=TurnError(f"turn_error.{control.reason.value}"),
                ),
                meter,
            )
            await self._finish(task, turn, outcome, denials, runner=runner, before=before)
            await self._queue.kick(task.id)
            raise
        except TurnTaken:
            raise
        except Exception as exc:
            if reported:  # the agent's exit after its answer went wrong: nothing to report
                log.exception("task %s turn %s: stopping the agent failed", task.id, turn.id)
            else:
                outcome = charged(failure(task, turn, exc), meter)
                await self._finish(task, turn, outcome, denials, runner=runner, before=before)
        await self._queue.kick(task.id)

    @contextlib.asynccontextmanager
    async def _one_agent(self, task_id: int) -> AsyncIterator[None]:
        """One agent process of a task at a time in this process: a turn reported while its
        agent still exits does not start the next turn's agent (same session) beside it. The
        wait is bounded by the agent stop's own bound."""
        previous = self._agents.get(task_id)
        if previous is not None:
            await asyncio.wait({previous}, timeout=AGENT_EXIT_WAIT_S)
        gone = asyncio.get_running_loop().create_future()
        self._agents[task_id] = gone
        try:
            yield
        finally:
            gone.set_result(None)
            if self._agents.get(task_id) is gone:
                del self._agents[task_id]

    @contextlib.contextmanager
    def _stops_from_elsewhere(
        self, turn_id: int, runner: str | None, control: TurnControl
    ) -> Iterator[None]:
        """A /cancel handled by another process (the bot, when this turn runs on a worker)
        arrives as a flag on the turn's row, looked for while the agent runs."""
        if self._stop_poll_s is None:
            yield
            return
        watcher = asyncio.create_task(self._watch_stop(turn_id, runner, control, self._stop_poll_s))
        try:
            yield
        finally:
            watcher.cancel()

    async def _watch_stop(
        self, turn_id: int, runner: str | None, control: TurnControl, every_s: float
    ) -> None:
        """A /cancel handled elsewhere, or another process that took the turn over (this
        runner was cut off past its lease): the turn stops, the second time hands off."""
        while True:
            await asyncio.sleep(every_s)
            if runner is not None and not await self._store.claims.holds(turn_id, runner):
                log.warning("turn %s: taken over by another process; stopping it", turn_id)
                control.request_stop(StopReason.TAKEN_OVER)
                return
            if await self._store.claims.stop_requested(turn_id):
                log.info("turn %s: stop requested from another process", turn_id)
                control.request_stop(StopReason.CANCELLED)
                return

    async def _check(
        self, task: Task, turn: Turn, outcome: TurnOutcome, tag: str | None
    ) -> CheckResult | None:
        """The task's check after a turn the agent finished (not after a failure, a cancel or
        a spent budget), in the task's directory; a repository's check once the owner approved
        it (else a result that says it did not run). Confined to the task's directory by the
        sandbox whenever this machine has one (the CheckRunner's), whatever the task's mode."""
        if not task.check or self._checks is None or outcome.status is not TaskStatus.DONE:
            return None
        if not await self._consent.allowed(task, turn.id):
            return CheckResult(task.check, False, None, "", 0.0, turn.check_round, approved=False)
        sandboxed = task.approval_mode is ApprovalMode.SANDBOX
        return await self._checks.run(task.check, Path(task.cwd), sandboxed, turn.check_round, tag)

    async def _finish(
        self,
        task: Task,
        turn: Turn,
        outcome: TurnOutcome,
        denials: tuple[str, ...],
        check: CheckResult | None = None,
        runner: str | None = None,
        before: Baseline | None = None,
    ) -> None:
        """Record the outcome, its spend, its check and the completion card in one transaction:
        a crash leaves either a running turn (recovered as interrupted, and said so) or a
        finished one whose card is queued, never a finished task that does not report. A failed
        check with rounds left queues the next round instead of a card. ``TurnTaken`` when
        another process took the turn over: nothing is written. ``before``: the repository as the
        turn found it, when the turn may have changed files (else the card lists no changes,
        and no git process runs for it)."""
        turn_id = turn.id
        if check is not None:
            # as stored, and as the next round's prompt feeds it back to the agent
            check = dataclasses.replace(check, output=self._store.redact(check.output))
        wanted = before is not None and outcome.status is not TaskStatus.FAILED
        changes = await turn_changes(task.cwd, before) if wanted and before else ""
        failed = check is not None and check.approved and not check.passed
        again = failed and turn.check_round < self._policy.check_rounds
        if failed and not again:
            outcome = dataclasses.replace(
                outcome,
                status=TaskStatus.CHECK_FAILED,
                error=TurnError("turn_error.check_failed", {"rounds": turn.check_round}),
            )
        try:
            async with self._store.atomic():
                if check is not None:
                    await self._store.checks.record(task.id, turn.id, check)
                if again and check is not None:
                    await self._next_round(task, turn, check)
                task, finished = await self._record(turn, outcome, runner)
                if not again:
                    ask = await self._budget_ask(task, finished)
                    row_id = await self._notifier.turn_finished(
                        task, finished, denials, changes, ask
                    )
                    if ask is not None:
                        await self._store.questions.set_row(ask.question_id, row_id)
                await self._notifier.ack_status(task)  # after the card: it is not held back
                failpoints.hit("finish.before_commit")
        except TurnTaken:
            raise
        except Exception:  # deliberate: a card that cannot be built must not leave it "running"
            log.exception("task %s turn %s: completion card failed", task.id, turn_id)
            async with self._store.atomic():
                task, _ = await self._record(turn, outcome, runner)
        failpoints.hit("finish.after_commit")
        log.info("task %s turn %s: %s", task.id, turn_id, outcome.status)

    async def _budget_ask(self, task: Task, turn: Turn) -> CardAsk | None:
        """A turn stopped at its task's budget: its card asks "extend or stop"."""
        if turn.status is not TaskStatus.BUDGET_EXCEEDED or task.max_usd is None:
            return None
        return await self._desk.budget_ask(
            task, turn.id, task.total_cost_usd, task.max_usd, self._money.extend_amount(task)
        )

    async def _next_round(self, task: Task, turn: Turn, check: CheckResult) -> None:
        """The check failed with rounds left: its output goes back to the same session as the
        next turn, and the chat gets one line instead of a card."""
        prompt = CHECK_PROMPT.format(command=check.command, output=check.tail(CHECK_PROMPT_TAIL))
        await self._store.tasks.add_turn(task.id, prompt, check_round=turn.check_round + 1)
        await self._notifier.check_retrying(task, check, self._policy.check_rounds)

    async def _record(
        self, turn: Turn, outcome: TurnOutcome, runner: str | None
    ) -> tuple[Task, Turn]:
        """The outcome and its spend (every turn that used tokens or cost anything, so /spend
        shows every engine's tokens); returns the task and the finished turn."""
        task, finished = await self._store.tasks.finish_turn(turn, outcome, runner)
        if outcome.cost_usd or outcome.input_tokens or outcome.output_tokens:
            await self._store.spend.record(
                task.owner_id,
                task.id,
                turn.id,
                outcome.cost_usd or 0.0,
                outcome.input_tokens or 0,
                outcome.output_tokens or 0,
                engine=task.engine,
                model=outcome.model,
                unpriced=outcome.unpriced,
            )
        return task, finished
