"""A repository's check needs the owner's consent.

A check from ``.detach.toml`` (``Task.check_repository`` set: not typed by the owner) runs only
once the owner approved that exact command for that repository: an approval message with the
whole command (Allow once: for this task; Always: remembered as a grant of engine ``check`` in
that repository, listed and revoked by /grants; Deny). It is asked when the task's turn starts,
so the owner sees it while the agent works; the check waits (bounded by the approval timeout)
for the answer when the turn ends. Every path that is not an explicit yes is a no: a timeout, a
restart, a cancel, an error — the check does not run and the card says so."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

from bot.approvals.desk import ApprovalDesk
from bot.approvals.view import CHECK_GRANTS, approval_keyboard, check_consent_text, check_pattern
from bot.models import ApprovalAnswer, QuestionKind, Task
from bot.store import Store
from bot.store.db import utcnow

log = logging.getLogger(__name__)


def needs_consent(task: Task) -> bool:
    return bool(task.check) and task.check_repository is not None


class CheckConsent:
    """Asks for, and answers, whether a task's repository check may run."""

    def __init__(self, store: Store, desk: ApprovalDesk) -> None:
        self._store = store
        self._desk = desk
        self._asking: dict[int, asyncio.Task[bool]] = {}  # task id -> its question, in flight

    async def ask_early(self, task: Task, turn_id: int) -> None:
        """Ask now, in the background, when the task's check needs an answer not given yet."""
        if not needs_consent(task) or task.id in self._asking or await self._given(task):
            return
        self._asking[task.id] = asyncio.create_task(self._ask(task, turn_id))

    async def allowed(self, task: Task, turn_id: int) -> bool:
        """Whether the task's check may run now: the owner's own check, a grant, a yes given
        in this task, or the answer to the question (asked now if not yet), bounded."""
        if not needs_consent(task):
            return True
        asking = self._asking.pop(task.id, None)
        if asking is None:
            if await self._given(task):
                return True
            asking = asyncio.create_task(self._ask(task, turn_id))
        return await asking

    def drop(self, task_id: int) -> None:
        """The turn is over: a question still in flight is closed (a no)."""
        asking = self._asking.pop(task_id, None)
        if asking is not None:
            asking.cancel()

    async def _given(self, task: Task) -> bool:
        assert task.check is not None and task.check_repository is not None
        granted = await self._store.grants.active(
            task.owner_id, CHECK_GRANTS, task.check_repository
        )
        if check_pattern(task.check) in {g.pattern for g in granted}:
            return True
        answered = await self._store.questions.answered(task.id, QuestionKind.APPROVAL)
        return any(q.payload.get("check") == task.check and _allows(q.answer) for q in answered)

    async def _ask(self, task: Task, turn_id: int) -> bool:
        assert task.check is not None and task.check_repository is not None
        timeout_s = self._desk.timeout_s
        text = check_consent_text(
            self._desk.texts, task, task.check, task.check_repository, timeout_s
        )
        try:
            question = await self._store.questions.create(
                task.id,
                turn_id,
                QuestionKind.APPROVAL,
                {
                    "tool": "check",
                    "rule": check_pattern(task.check),
                    "check": task.check,
                    "grant_engine": CHECK_GRANTS,
                    "grant_cwd": task.check_repository,
                    "engine": task.engine,
                    "cwd": task.cwd,
                    "text": text,
                },
                utcnow() + timedelta(seconds=timeout_s),
            )
            markup = approval_keyboard(self._desk.texts, task.locale, question.id)
            answer = await self._desk.post_and_wait(task, question, text, markup)
        except asyncio.CancelledError:
            raise
        except Exception:  # a question that fails is a no, never a yes
            log.exception("task %s: asking for its check's consent failed", task.id)
            return False
        await self._store.audit.record("check_consent", task.owner_id, task.id, answer)
        log.info("task %s: repository check -> %s", task.id, answer)
        return _allows(answer)


def _allows(answer: str | None) -> bool:
    """Whether a stored answer is a yes (an explicit Allow or Always; anything else is a no)."""
    return answer in (ApprovalAnswer.ALLOW, ApprovalAnswer.ALWAYS)
