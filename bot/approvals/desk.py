"""The approval desk: an agent's permission requests and questions become persisted pending
questions and Telegram buttons; the turn awaits the owner's tap. Every path that is not an
explicit Allow is a deny: timeouts, errors, a turn that ends, a restart."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Iterator
from dataclasses import asdict
from datetime import timedelta

from bot.approvals.copies import edit_copies, first_line
from bot.approvals.view import (
    DONE,
    approval_keyboard,
    approval_text,
    budget_keyboard,
    confirm_keyboard,
    question_keyboard,
    question_text,
)
from bot.events import ApprovalDecision, ApprovalRequest, Question
from bot.models import ApprovalAnswer, MessageKind, QuestionKind, QuestionStatus, Task
from bot.store import PendingQuestion, Store
from bot.store.db import utcnow
from bot.telegram.completion import CardAsk
from bot.telegram.notifier import Notifier
from bot.telegram.render import usd
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)


class ApprovalDesk:
    def __init__(
        self,
        store: Store,
        notifier: Notifier,
        texts: Texts,
        timeout_s: float,
        answer_poll_s: float | None = None,
    ) -> None:
        """``answer_poll_s``: how often a pending question is re-read from the database, for
        answers taken by another process (scale-out); None in a single process."""
        self._answer_poll_s = answer_poll_s
        self._store = store
        self._notifier = notifier
        self._texts = texts
        self._timeout_s = timeout_s
        self._waiting: dict[int, asyncio.Future[str]] = {}
        self._asking: dict[int, int] = {}  # task id -> its questions awaited here now
        self._background: set[asyncio.Task[None]] = set()

    def for_turn(self, task: Task, turn_id: int) -> TurnApprover:
        return TurnApprover(self, task, turn_id)

    def asking(self, task_id: int) -> bool:
        """Whether a turn of the task waits here now for the owner's answer (an approval or a
        question, from the engine's request on): its progress line says so, and no stall
        watchdog speaks for it."""
        return self._asking.get(task_id, 0) > 0

    @contextlib.contextmanager
    def asked(self, task_id: int) -> Iterator[None]:
        """While an engine awaits the decision on its request (``asking``)."""
        self._asking[task_id] = self._asking.get(task_id, 0) + 1
        try:
            yield
        finally:
            self._asking[task_id] -= 1
            if not self._asking[task_id]:
                del self._asking[task_id]

    @property
    def texts(self) -> Texts:
        return self._texts

    @property
    def timeout_s(self) -> float:
        return self._timeout_s

    @property
    def minutes(self) -> int:
        return max(1, round(self._timeout_s / 60))

    async def decide(self, task: Task, turn_id: int, request: ApprovalRequest) -> ApprovalDecision:
        if request.questions:
            return await self._ask_all(task, turn_id, request.questions)
        loc = task.locale
        granted = await self._store.grants.active(task.owner_id, task.engine, task.cwd)
        if request.rule in {g.pattern for g in granted}:  # engines that do not take rules
            await self._store.audit.record(
                "approval", task.owner_id, task.id, f"{request.tool_name}: granted {request.rule}"
            )
            return ApprovalDecision(allow=True, always=True)
        question = await self._store.questions.create(
            task.id,
            turn_id,
            QuestionKind.APPROVAL,
            {
                "tool": request.tool_name,
                "rule": request.rule,
                "engine": task.engine,
                "cwd": task.cwd,
                "text": approval_text(self._texts, task, request, self._timeout_s),
            },
            utcnow() + timedelta(seconds=self._timeout_s),
        )
        answer = await self.post_and_wait(
            task,
            question,
            question.payload["text"],
            approval_keyboard(self._texts, loc, question.id),
        )
        await self._store.audit.record(
            "approval", task.owner_id, task.id, f"{request.tool_name}: {answer}"
        )
        log.info("task %s: %s request %s -> %s", task.id, request.tool_name, question.id, answer)
        if answer in (ApprovalAnswer.ALLOW, ApprovalAnswer.ALWAYS):
            return ApprovalDecision(allow=True, always=answer == ApprovalAnswer.ALWAYS)
        key = (
            "approval.deny_message" if answer == ApprovalAnswer.DENY else "approval.timeout_message"
        )
        return ApprovalDecision(
            allow=False, message=self._texts.get(loc, key, minutes=self.minutes)
        )

    async def _ask_all(
        self, task: Task, turn_id: int, questions: tuple[Question, ...]
    ) -> ApprovalDecision:
        answers: dict[str, str] = {}
        for item in questions:
            question = await self._store.questions.create(
                task.id,
                turn_id,
                QuestionKind.QUESTION,
                {**asdict(item), "selected": []},
                utcnow() + timedelta(seconds=self._timeout_s),
            )
            answer = await self.post_and_wait(
                task,
                question,
                question_text(self._texts, task, item),
                question_keyboard(self._texts, task.locale, question.id, item, []),
            )
            if answer in (ApprovalAnswer.TIMEOUT, ApprovalAnswer.ENDED):
                return ApprovalDecision(
                    allow=False,
                    message=self._texts.get(
                        task.locale, "approval.question_timeout", minutes=self.minutes
                    ),
                )
            answers[item.text] = answer
        return ApprovalDecision(allow=True, answers=answers)

    async def post_and_wait(self, task: Task, question: PendingQuestion, text: str, markup) -> str:  # type: ignore[no-untyped-def]
        """Post the question (a new message, so the phone notifies) and wait for the owner's
        answer, or ``ApprovalAnswer.TIMEOUT`` / ``ENDED`` after closing the question ourselves.
        The task's acknowledgement says what it waits for meanwhile."""
        answer = await self._post_and_wait(task, question, text, markup)
        await self._acknowledged(task.id)
        return answer

    async def _acknowledged(self, task_id: int) -> None:
        """The task's acknowledgement says what it waits for now (``bot.models.WaitState``)."""
        task = await self._store.tasks.get(task_id)
        if task is not None:
            await self._notifier.ack_status(task)

    async def _post_and_wait(self, task: Task, question: PendingQuestion, text: str, markup) -> str:  # type: ignore[no-untyped-def]
        """``post_and_wait``'s question and its answer. The answer can be tapped as soon as
        the message exists, so the future is registered before it is sent."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._waiting[question.id] = future
        row_id: int | None = None
        try:
            row_id = await self._notifier.send(task, text, kind=MessageKind.APPROVAL, markup=markup)
            await self._store.questions.set_row(question.id, row_id)
            await self._acknowledged(task.id)
            remember = asyncio.create_task(self._remember_message(task, question, row_id))
            self._background.add(remember)
            remember.add_done_callback(self._background.discard)
            return await self._answer(question.id, future)
        except TimeoutError:
            return await self._close(
                task, question, ApprovalAnswer.TIMEOUT, "approval.expired", future, row_id
            )
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):  # deliberate: the cancel must go on whatever
                await asyncio.shield(
                    self._close(
                        task, question, ApprovalAnswer.ENDED, "approval.ended", future, row_id
                    )
                )
            raise
        finally:
            self._waiting.pop(question.id, None)

    async def _answer(self, qid: int, future: asyncio.Future[str]) -> str:
        """The owner's answer: set here by the button handler of this process, or found in the
        database when the bot runs elsewhere (this turn runs on a scale-out worker)."""
        if self._answer_poll_s is None:
            return await asyncio.wait_for(asyncio.shield(future), self._timeout_s)
        deadline = asyncio.get_running_loop().time() + self._timeout_s
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                raise TimeoutError
            try:
                return await asyncio.wait_for(
                    asyncio.shield(future), min(left, self._answer_poll_s)
                )
            except TimeoutError:
                stored = await self._store.questions.get(qid)
                if (
                    stored is not None
                    and stored.status == QuestionStatus.ANSWERED
                    and stored.answer
                ):
                    return stored.answer

    async def _remember_message(self, task: Task, question: PendingQuestion, row_id: int) -> None:
        message_id = await self._notifier.delivered(row_id)
        if message_id is not None:
            await self._store.questions.set_message(question.id, task.chat_id, message_id)

    async def _close(
        self,
        task: Task,
        question: PendingQuestion,
        answer: str,
        key: str,
        future: asyncio.Future[str],
        row_id: int | None,
    ) -> str:
        if not await self._store.questions.resolve(question.id, QuestionStatus.EXPIRED, answer):
            fresh = await self._store.questions.get(question.id)  # the owner just answered
            return (
                future.result()
                if future.done()
                else (fresh.answer if fresh and fresh.answer else answer)
            )
        text = first_line(question) + "\n\n" + self._texts.get(task.locale, key)
        if row_id is not None:  # the outbox edits the message that row became, in order
            await self._notifier.edit_row(task.chat_id, row_id, text)
        await edit_copies(self._store, self._notifier, question.id, text)
        return answer

    async def budget_ask(
        self, task: Task, turn_id: int, spent_usd: float, cap_usd: float, extend_usd: float
    ) -> CardAsk:
        """A budget breach parks the task with "extend or stop", asked on the turn's card (one
        message); the answer arrives through the use cases (they queue the resumed turn), so
        nothing waits here. The caller records which message asks (``questions.set_row``).
        An older one of the task still open (a follow-up moved it on, and hit the budget
        again) is closed first: only the newest decision is shown and tappable."""
        await self._supersede_budget(task)
        loc = task.locale
        line = self._texts.get(
            loc,
            "money.budget_ask",
            spent=usd(spent_usd),
            cap=usd(cap_usd),
            extend=usd(extend_usd),
        )
        question = await self._store.questions.create(
            task.id,
            turn_id,
            QuestionKind.BUDGET,
            {"spent": spent_usd, "cap": cap_usd, "extend": extend_usd, "line": line},
            None,
        )
        return CardAsk(
            question.id, line, budget_keyboard(self._texts, loc, question.id, extend_usd)
        )

    async def _supersede_budget(self, task: Task) -> None:
        """The task's open budget questions expire; their cards and /pending copies say so."""
        for old in await self._store.questions.supersede(task.id, QuestionKind.BUDGET):
            line = self._texts.get(task.locale, "money.budget_superseded")
            await self._notifier.budget_answered(task, old, line)
            await edit_copies(self._store, self._notifier, old.id, f"{first_line(old)}\n\n{line}")
            log.info("task %s: budget question %s superseded", task.id, old.id)

    def settle(self, qid: int, answer: str) -> None:
        future = self._waiting.get(qid)
        if future is not None and not future.done():
            future.set_result(answer)

    async def expire(
        self, turn_ids: Collection[int] | None = None, key: str = "approval.restarted"
    ) -> int:
        """Questions the process that asked them can no longer wait for (it died: all of them
        at a restart, or a dead worker's ``turn_ids``): expired, and each message says so."""
        expired = await self._store.questions.expire_pending(turn_ids)
        for question in expired:
            task = await self._store.tasks.get(question.task_id)
            text = (
                first_line(question) + "\n\n" + self._texts.get(task.locale if task else "en", key)
            )
            if question.chat_id is not None and question.message_id is not None:
                await self._notifier.edit(question.chat_id, question.message_id, text)
            elif question.row_id is not None and task is not None:
                await self._notifier.edit_row(task.chat_id, question.row_id, text)
            await edit_copies(self._store, self._notifier, question.id, text)
        return len(expired)


class TurnApprover:
    """The Approver port for one turn of one task."""

    def __init__(self, desk: ApprovalDesk, task: Task, turn_id: int) -> None:
        self._desk = desk
        self._task = task
        self._turn_id = turn_id

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        try:
            with self._desk.asked(self._task.id):
                return await self._desk.decide(self._task, self._turn_id, request)
        except asyncio.CancelledError:
            raise
        except Exception:  # an approval that fails is a deny, never an allow
            log.exception("task %s: approval failed; denying", self._task.id)
            return ApprovalDecision(allow=False, message="The approval request failed; denied.")


__all__ = ["DONE", "ApprovalDesk", "TurnApprover", "confirm_keyboard"]
