"""A turn's end, written once: its outcome, its spend, its check and its completion card (the
store redacts the secrets in them) commit together, so a crash leaves either a running turn
(recovered as interrupted) or a finished one whose card is queued. A failed check with rounds
left queues the next round instead of a card; a turn stopped at its budget's card asks "extend
or stop"."""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass

from bot import failpoints
from bot.approvals.desk import ApprovalDesk
from bot.errors import TurnTaken
from bot.models import CheckResult, Task, TaskStatus, Turn, TurnError
from bot.money.desk import MoneyDesk
from bot.ports import TaskWorktrees, TreeState
from bot.store import Store, TurnOutcome
from bot.telegram.completion import CardAsk
from bot.telegram.notifier import Notifier
from bot.turns.baseline import Baseline, changes_since, glance
from bot.turns.outcome import CHECK_PROMPT, CHECK_PROMPT_TAIL
from executors.gitguard import GitGuard

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Ending:
    """What one turn's end writes: its outcome (after its check), the tools it was denied,
    its check, the files it changed (the card lists them) and whether the check goes again
    (its next round instead of a card)."""

    outcome: TurnOutcome
    denials: tuple[str, ...]
    check: CheckResult | None
    changes: str
    again: bool
    worktree_work: bool = False  # the card offers Merge and Discard


class TurnFinisher:
    def __init__(
        self,
        *,
        store: Store,
        notifier: Notifier,
        desk: ApprovalDesk,
        money: MoneyDesk,
        check_rounds: int,
        git: GitGuard,
        worktrees: TaskWorktrees | None = None,
    ) -> None:
        """``check_rounds``: how many times a failed check goes back to the agent. The store
        redacts the secrets from what a turn stores and shows (``Store.redact``).
        ``worktrees``: whether the task's own worktree holds work (its card's Merge)."""
        self._git = git
        self._worktrees = worktrees
        self._store = store
        self._notifier = notifier
        self._desk = desk
        self._money = money
        self._check_rounds = check_rounds

    async def finish(
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
        changes, seen = ("", None)
        if wanted and before:
            changes, seen = await changes_since(self._git, task.cwd, before)
        outcome, again = self._judged(turn, outcome, check)
        work = await self._offers(task, seen)
        ending = Ending(outcome, denials, check, changes, again, work)
        try:
            async with self._store.atomic():
                task = await self._write(task, turn, ending, runner)
                failpoints.hit("finish.before_commit")
        except TurnTaken:
            raise
        except Exception:  # deliberate: a card that cannot be built must not leave it "running"
            log.exception("task %s turn %s: completion card failed", task.id, turn_id)
            async with self._store.atomic():
                task, _ = await self._record(turn, outcome, runner)
        failpoints.hit("finish.after_commit")
        log.info("task %s turn %s: %s", task.id, turn_id, outcome.status)
        # an agent's ask_owner whose `detach mcp` went down with the agent: its message says so
        await self._desk.expire([turn_id], "approval.ended")

    async def _offers(self, task: Task, seen: TreeState | None) -> bool:
        """Merge and Discard on the card: from the state the card's changes were read with,
        else from the jail the turn started for its card (``bot.turns.card_jail``)."""
        if self._worktrees is None:
            return False
        if seen is not None:
            return await self._worktrees.offers(task.id, functools.partial(_known, seen))
        return await self._worktrees.offers(task.id, functools.partial(glance, self._git, task.cwd))

    def _judged(
        self, turn: Turn, outcome: TurnOutcome, check: CheckResult | None
    ) -> tuple[TurnOutcome, bool]:
        """The outcome after the check, and whether the check goes again: a failed check with
        rounds left does; with none left the turn ends ``check_failed``."""
        failed = check is not None and check.approved and not check.passed
        again = failed and turn.check_round < self._check_rounds
        if failed and not again:
            outcome = dataclasses.replace(
                outcome,
                status=TaskStatus.CHECK_FAILED,
                error=TurnError("turn_error.check_failed", {"rounds": turn.check_round}),
            )
        return outcome, again

    async def _write(self, task: Task, turn: Turn, ending: Ending, runner: str | None) -> Task:
        """Inside the caller's transaction: the check, its next round or the card (asking
        "extend or stop" at the budget), the outcome and its spend, the status line."""
        check = ending.check
        if check is not None:
            await self._store.checks.record(task.id, turn.id, check)
        if ending.again and check is not None:
            await self._next_round(task, turn, check)
        task, finished = await self._record(turn, ending.outcome, runner)
        if not ending.again:
            ask = await self._budget_ask(task, finished)
            row_id = await self._notifier.turn_finished(
                task, finished, ending.denials, ending.changes, ask, ending.worktree_work
            )
            if ask is not None:
                await self._store.questions.set_row(ask.question_id, row_id)
        await self._notifier.ack_status(task)  # after the card: it is not held back
        return task

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
        await self._notifier.check_retrying(task, check, self._check_rounds)

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


async def _known(seen: TreeState) -> TreeState:
    return seen
