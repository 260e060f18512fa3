"""One turn of a task: claim it, run the engine, keep the transcript, record the outcome, report."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from bot import failpoints
from bot.approvals.desk import ApprovalDesk
from bot.engines import Engines
from bot.errors import (
    TurnTaken,
    UserInputError,
)
from bot.models import (
    ApprovalMode,
    CheckResult,
    McpServerSpec,
    Task,
    TaskStatus,
    Turn,
    TurnError,
    TurnSpec,
)
from bot.money.desk import MoneyDesk
from bot.money.presets import Preset
from bot.ports import CheckRunner
from bot.store import Store, TurnOutcome
from bot.tasks.workdirs import WorkdirPolicy
from bot.telegram.notifier import Notifier
from bot.turns.drive import Drive
from bot.turns.gitinfo import diff_stat
from bot.turns.limits import Parking
from bot.turns.outcome import (
    CHECK_PROMPT,
    CHECK_PROMPT_TAIL,
    failure,
    preamble,
)
from bot.turns.pool import Claimed, StopReason, TurnControl
from bot.turns.queue import TurnQueue

log = logging.getLogger(__name__)

# stops after which a turn writes nothing: left running for recovery at the next start
# (shutdown), or another process's turn now (taken over); None: the pool itself went away
HANDS_OFF = (None, StopReason.SHUTDOWN, StopReason.TAKEN_OVER)
AGENT_EXIT_WAIT_S = 30.0  # a previous agent of the task still exiting (its stop is bounded)
SUBTASK_SERVER = "detach"  # the MCP server's name the agent sees: mcp__detach__start…


class RunnerIdentity(Protocol):
    """Which runner this process is now (``bot.fleet.lease.Lease``, or a fixed name)."""

    @property
    def runner_id(self) -> str: ...


@dataclass(frozen=True, slots=True)
class TurnPolicy:
    """How turns run: the tools of ``auto`` mode, when a progress message appears (a turn
    shorter than ``progress_delay_s`` gets none) and how often it is edited, how many check
    rounds a task gets (a failing check sends its output back to the agent until then), and the
    hosts a sandboxed turn may reach without asking."""

    auto_allowed_tools: tuple[str, ...] = ()
    progress_interval_s: float = 3.0
    progress_delay_s: float = 5.0
    check_rounds: int = 2
    sandbox_domains: tuple[str, ...] = ()
    timezone: str = "UTC"  # for times said to a user who set no /tz
    limit_retry_s: float = 900.0  # a usage limit without a reset time: try again after this
    # the command (and its environment) of `detach mcp`, given to the agent of a task with
    # ``subtasks=yes`` (with ``--parent <task id>``); empty: no sub-tasks here
    subtask_command: tuple[str, ...] = ()
    subtask_env: Mapping[str, str] = field(default_factory=dict)
    agent_nice: int = 0  # how much nicer than the bot a turn's processes run


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
        self._workdirs = workdirs
        self._identity = identity
        self._stop_poll_s = stop_poll_s
        self._process_tag = process_tag
        self._runs = itertools.count(1)
        self._checks = checks
        self._agents: dict[int, asyncio.Future[None]] = {}  # task id -> its agent is gone
        self._drive = Drive(
            store=store,
            engines=engines,
            notifier=notifier,
            desk=desk,
            progress_interval_s=policy.progress_interval_s,
            progress_delay_s=policy.progress_delay_s,
            shared=stop_poll_s is not None,
        )
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

    async def _run_claimed(
        self, task: Task, turn: Turn, control: TurnControl, runner: str | None
    ) -> None:
        until = await self._queue.limited_until(task.engine)
        if until is not None:  # submitted before its engine's limit was known: it waits too
            await self._parking.park(task, turn, until, runner)
            return
        if turn.parked_at is not None:  # a wait is over: said once, the first time
            await self._notifier.limit_over(task, task.engine.capitalize(), turn.limit_parks <= 1)
        log.info("task %s turn %s: running (%s)", task.id, turn.id, task.engine)
        denials: tuple[str, ...] = ()
        check: CheckResult | None = None
        refusal = await self._refusal(task)
        if refusal is not None:
            await self._finish(task, turn, refusal, denials, runner=runner)
            await self._queue.kick(task.id)
            return
        preset = self._money.catalog.get(task.preset)
        left = self._money.budget_left(task)
        reported = False  # the outcome and its card are committed; the agent may still exit
        try:
            spec = await self._spec(task, turn, preset, left)
            async with self._one_agent(task.id), contextlib.AsyncExitStack() as agent:
                with control.running(), self._stops_from_elsewhere(turn.id, runner, control):
                    driven = await self._drive.drive(task, turn, spec, preset, left, agent, runner)
                    outcome, denials = driven.outcome, driven.denials
                    check = await self._check(task, turn, outcome, spec.process_tag)
                # The answer is reported while the agent exits after it (tens of ms for
                # Claude); the block ends once it did, and only then may the next turn start.
                if outcome.status is TaskStatus.WAITING_FOR_LIMIT:
                    await self._parking.park(task, turn, outcome.resume_at, runner)
                else:
                    # only reading tools (or none) and no check: nothing changed, no git to ask
                    changed = driven.acted or check is not None
                    await self._finish(task, turn, outcome, denials, check, runner, changed)
                reported = True
        except asyncio.CancelledError:
            if reported or control.reason in HANDS_OFF:
                raise  # recovered as `interrupted` at the next start, or another process's now
            outcome = TurnOutcome(
                status=TaskStatus(control.reason.value),
                error=TurnError(f"turn_error.{control.reason.value}"),
            )
            await self._finish(task, turn, outcome, denials, runner=runner)
            await self._queue.kick(task.id)
            raise
        except TurnTaken:
            raise
        except Exception as exc:
            if reported:  # the agent's exit after its answer went wrong: nothing to report
                log.exception("task %s turn %s: stopping the agent failed", task.id, turn.id)
            else:
                await self._finish(task, turn, failure(task, turn, exc), denials, runner=runner)
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

    async def _spec(
        self, task: Task, turn: Turn, preset: Preset | None, left: float | None
    ) -> TurnSpec:
        return TurnSpec(
            task_id=task.id,
            turn_id=turn.id,
            prompt=turn.prompt,
            cwd=Path(task.cwd),
            model=task.model,
            resume_session_id=task.session_id,
            append_system_prompt=preamble(task),
            allowed_tools=await self._allowed_tools(task),
            approval_mode=task.approval_mode,
            extra_args=preset.args if preset else (),
            max_budget_usd=left,  # engines that take a budget enforce it themselves
            # one tag per run of the turn: the sweep after a run (in the background) must not
            # find the next run of the same turn (a handover runs it again at once)
            process_tag=f"{self._process_tag}:{turn.id}.{next(self._runs)}"
            if self._process_tag
            else None,
            sandbox_domains=self._policy.sandbox_domains,
            preset=preset,
            mcp_servers=self._subtask_server(task),
            nice=self._policy.agent_nice,
        )

    def _subtask_server(self, task: Task) -> tuple[McpServerSpec, ...]:
        """`detach mcp --parent <task>` for a task whose agent may start sub-tasks."""
        command = self._policy.subtask_command
        if not task.subtasks or not command:
            return ()
        args = (*command[1:], "--parent", str(task.id))
        return (McpServerSpec(SUBTASK_SERVER, command[0], args, self._policy.subtask_env),)

    async def _check(
        self, task: Task, turn: Turn, outcome: TurnOutcome, tag: str | None
    ) -> CheckResult | None:
        """The task's check after a turn the agent finished (not after a failure, a cancel or
        a spent budget), in the task's directory; inside the sandbox for sandboxed tasks."""
        if not task.check or self._checks is None or outcome.status is not TaskStatus.DONE:
            return None
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
        changed: bool = True,
    ) -> None:
        """Record the outcome, its spend, its check and the completion card in one transaction:
        a crash leaves either a running turn (recovered as interrupted, and said so) or a
        finished one whose card is queued, never a finished task that does not report. A failed
        check with rounds left queues the next round instead of a card. ``TurnTaken`` when
        another process took the turn over: nothing is written. ``changed``: the turn may have
        changed files (else the card lists no changes, and no git process runs for it)."""
        turn_id = turn.id
        wanted = changed and outcome.status is not TaskStatus.FAILED
        changes = await diff_stat(task.cwd) if wanted else ""
        again = (
            check is not None and not check.passed and turn.check_round < self._policy.check_rounds
        )
        if check is not None and not check.passed and not again:
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
                    await self._notifier.turn_finished(task, finished, denials, changes)
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
        if outcome.status is TaskStatus.BUDGET_EXCEEDED and task.max_usd is not None:
            await self._desk.ask_budget(
                task, turn_id, task.total_cost_usd, task.max_usd, self._money.extend_amount(task)
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
        """The outcome and its spend; returns the task and the finished turn."""
        task, finished = await self._store.tasks.finish_turn(turn, outcome, runner)
        if outcome.cost_usd:
            await self._store.spend.record(
                task.owner_id,
                task.id,
                turn.id,
                outcome.cost_usd,
                outcome.input_tokens or 0,
                outcome.output_tokens or 0,
            )
        return task, finished

    async def _refusal(self, task: Task) -> TurnOutcome | None:
        """Work that must not start: over the daily cap (turns queued from the shell or before
        the cap was reached), or a task whose budget is already spent."""
        over = await self._money.over_daily_cap(task.owner_id)
        if over is not None:
            return TurnOutcome(
                TaskStatus.FAILED, error=TurnError("money.daily_cap_turn", dict(over[1]))
            )
        left = self._money.budget_left(task)
        if left is not None and left <= 0:
            return TurnOutcome(
                TaskStatus.BUDGET_EXCEEDED, error=TurnError("turn_error.budget_spent")
            )
        if self._workdirs is not None:
            try:
                self._workdirs.check(Path(task.cwd))  # the allow-list may have changed since
            except UserInputError as exc:
                return TurnOutcome(TaskStatus.FAILED, error=TurnError(exc.key, exc.params))
        return None

    async def _allowed_tools(self, task: Task) -> tuple[str, ...]:
        """Remembered grants of the owner for this engine and directory; in auto mode also the
        tools from settings; in readonly mode nothing."""
        if task.approval_mode is ApprovalMode.READONLY:
            return ()
        grants = await self._store.grants.active(task.owner_id, task.engine, task.cwd)
        tools = tuple(g.pattern for g in grants)
        if task.subtasks and self._policy.subtask_command:
            tools += (f"mcp__{SUBTASK_SERVER}",)  # its own sub-tasks: no approval to ask
        if task.approval_mode is ApprovalMode.AUTO:
            tools = self._policy.auto_allowed_tools + tools
        return tools
