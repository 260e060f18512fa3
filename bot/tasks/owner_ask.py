"""`ask_owner`: a task's agent asks its owner one question with up to four answers, in the
task's thread, and its tool call waits for a tap or the wait's end (DETACH_PREFLIGHT_WAIT_S).

The question is a pending question of the approvals' kind ``question`` (``bot.approvals``), so
its buttons, the owner-only check of a tap, /pending's copies and a restart's expiry are
theirs; this process (`detach mcp`, not the bot) reads the answer back from the table. Whatever
ends the wait, the message is edited to say what happened: the answer, no answer, or the
turn's end."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from bot.errors import ToolRefused
from bot.events import Question
from bot.models import ApprovalAnswer, MessageKind, QuestionKind, QuestionStatus, Task
from bot.store import PendingQuestion, Store
from bot.store.db import utcnow

if TYPE_CHECKING:
    from bot.telegram.notifier import Notifier

log = logging.getLogger(__name__)

QUESTION_CHARS = 500
ANSWER_CHARS = 60  # a button's caption
MOST_ANSWERS = 4
UNATTENDED = "schedule_run"  # the audit action of a task a schedule started
NO_ANSWER = "no answer: use your judgement"
ASKED = "AskedOwner"  # its transcript event (``bot.turns.transcript``, ``bot.turns.items``)


@dataclass(frozen=True, slots=True)
class AskRules:
    """How long a question waits (DETACH_PREFLIGHT_WAIT_S), how often its row is read, and
    whether a task a schedule started may ask (DETACH_ASK_UNATTENDED)."""

    wait_s: float = 1800.0
    poll_s: float = 0.5
    unattended: bool = True


class OwnerQuestions:
    """Asks, waits and closes; ``notifier``: this process's, whose outbox the bot delivers."""

    def __init__(self, store: Store, notifier: Notifier, rules: AskRules) -> None:
        self._store = store
        self._notifier = notifier
        self._rules = rules

    async def ask(self, task: Task, question: str, answers: Sequence[str]) -> dict[str, Any]:
        """The owner's answer (``answered``: false and a note when none came)."""
        item = _item(question, answers, self._header(task))
        turn = await self._store.tasks.last_turn(task.id)
        if turn is None or not task.status.active:
            raise ToolRefused(f"{task.label} runs no turn: nothing was asked")
        if not self._rules.unattended and await self._unattended(task):
            raise ToolRefused(
                "a schedule started this task and its owner set DETACH_ASK_UNATTENDED=no: "
                "nobody is asked; use your judgement and say what you chose in your answer"
            )
        deadline = utcnow() + timedelta(seconds=self._rules.wait_s)
        payload = {"text": item.text, "header": item.header, "options": list(item.options)}
        row = await self._store.questions.create(
            task.id,
            turn.id,
            QuestionKind.QUESTION,
            {**payload, "multi": False, "selected": []},
            deadline,
        )
        log.info("task %s: the agent asks its owner (question %s)", task.id, row.id)
        from bot.approvals.view import question_keyboard, question_text  # aiogram's types

        texts = self._notifier.texts
        markup = question_keyboard(texts, task.locale, row.id, item, [])
        row_id = await self._notifier.send(
            task, question_text(texts, task, item), MessageKind.APPROVAL, markup=markup
        )
        await self._store.questions.set_row(row.id, row_id)
        return await self._awaited(task, row, row_id)

    async def _awaited(self, task: Task, row: PendingQuestion, row_id: int) -> dict[str, Any]:
        try:
            answer = await self._answer(row.id)
        except asyncio.CancelledError:  # the turn ended (its agent went): the message says so
            with contextlib.suppress(Exception):  # deliberate: the cancel goes on whatever
                await asyncio.shield(self._close(task, row, row_id, ApprovalAnswer.ENDED))
            raise
        if answer is None:
            answer = await self._close(task, row, row_id, ApprovalAnswer.TIMEOUT)
        await self._record(row, answer)
        if answer is None:
            return {"answered": False, "note": NO_ANSWER}
        return {"answered": True, "answer": answer}

    async def _record(self, row: PendingQuestion, answer: str | None) -> None:
        """The question and its answer in the transcript (the board, /export): ❓ q → a."""
        if row.turn_id is None:
            return
        question = str(row.payload.get("text", ""))
        said = f"{question} → {answer if answer is not None else NO_ANSWER}"
        body = {"text": said, "question": question, "answer": answer}
        await self._store.transcript.append(row.task_id, row.turn_id, [(ASKED, body)])

    async def _answer(self, qid: int) -> str | None:
        """The tapped answer, read from the question's row; None: it waited the whole wait, or
        it was closed without one (the bot restarted)."""
        deadline = time.monotonic() + self._rules.wait_s
        while time.monotonic() < deadline:
            found = await self._store.questions.get(qid)
            if found is None or found.status == QuestionStatus.EXPIRED:
                return None
            if found.status == QuestionStatus.ANSWERED:
                return found.answer or ""
            await asyncio.sleep(min(self._rules.poll_s, max(deadline - time.monotonic(), 0)))
        return None

    async def _close(
        self, task: Task, row: PendingQuestion, row_id: int, why: ApprovalAnswer
    ) -> str | None:
        """Expire the question and say why in its message and copies; a tap that came first
        wins (its answer is returned)."""
        from bot.approvals.copies import edit_copies, first_line

        key = "ask_owner.no_answer" if why == ApprovalAnswer.TIMEOUT else "approval.ended"
        text = first_line(row) + "\n\n" + self._notifier.texts.get(task.locale, key)
        # one transaction: a process stopped with its agent between the two (a /cancel) left the
        # row closed and its message unedited, and the bot's own sweep then found nothing open
        async with self._store.atomic():
            if not await self._store.questions.resolve(row.id, QuestionStatus.EXPIRED, why):
                fresh = await self._store.questions.get(row.id)
                answered = fresh is not None and fresh.status == QuestionStatus.ANSWERED
                return (fresh.answer or "") if answered and fresh else None
            await self._notifier.edit_row(task.chat_id, row_id, text)
            await edit_copies(self._store, self._notifier, row.id, text)
        log.info("task %s: question %s closed (%s)", task.id, row.id, why)
        return None

    async def _unattended(self, task: Task) -> bool:
        found = await self._store.audit.of_user(task.owner_id, [UNATTENDED], task_id=task.id)
        return bool(found)

    def _header(self, task: Task) -> str:
        return self._notifier.texts.template(task.locale, "ask_owner.header")


def _item(question: str, answers: Sequence[str], header: str) -> Question:
    """The agent's question, checked: one short text and one to four short answers."""
    question = question.replace("\x00", "").strip()
    if not question:
        raise ToolRefused("the question is empty")
    if len(question) > QUESTION_CHARS:
        raise ToolRefused(f"the question has {len(question)} characters; at most {QUESTION_CHARS}")
    options = [" ".join(a.replace("\x00", "").split()) for a in answers]
    if not 1 <= len(options) <= MOST_ANSWERS or not all(options):
        raise ToolRefused(f"give 1 to {MOST_ANSWERS} answers the owner can tap, none empty")
    if any(len(a) > ANSWER_CHARS for a in options) or len(set(options)) < len(options):
        raise ToolRefused(f"each answer: at most {ANSWER_CHARS} characters, all different")
    return Question(question, header, tuple(options))
