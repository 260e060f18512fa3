"""A task's check around its turns: a repository's check asks its owner's consent as the turn
starts (``bot.approvals.consent``), and runs after a turn the agent finished, in the task's
directory, confined by the sandbox whenever this machine has one (the ``CheckRunner``'s),
whatever the task's mode. A check not approved does not run; its result says so."""

from __future__ import annotations

from pathlib import Path

from bot.approvals.consent import CheckConsent
from bot.approvals.desk import ApprovalDesk
from bot.models import ApprovalMode, CheckResult, Task, TaskStatus, Turn
from bot.ports import CheckRunner
from bot.store import Store, TurnOutcome


class TurnCheck:
    def __init__(self, store: Store, desk: ApprovalDesk, checks: CheckRunner | None) -> None:
        """``checks`` runs a task's check (None: no checks run here)."""
        self._consent = CheckConsent(store, desk)  # a repository's check waits for the owner
        self._checks = checks

    async def ask_early(self, task: Task, turn_id: int) -> None:
        """A repository's check asks its owner now: they answer while the agent works."""
        await self._consent.ask_early(task, turn_id)

    def drop(self, task_id: int) -> None:
        """The turn is over: a check question still open with no turn is a no."""
        self._consent.drop(task_id)

    async def after(
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
