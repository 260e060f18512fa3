"""The copies of an open approval, question or budget ask that /pending showed: rows of their
own (``store.copies``), the newest one per chat, edited wherever the original is (an answer, a
timeout, the turn's end, a restart), so no copy keeps live buttons or says it waits once its
question is settled. A copy that a newer one replaces says so in one line, without buttons."""

from __future__ import annotations

import html
from dataclasses import dataclass

from bot.approvals.view import (
    approval_keyboard,
    budget_keyboard,
    question_item,
    question_keyboard,
    question_text,
)
from bot.models import (
    ACTIVE_STATUSES,
    CopyOf,
    QuestionKind,
    QuestionStatus,
    Task,
    TaskStatus,
    WaitState,
)
from bot.store import PendingCopy, PendingQuestion, Store
from bot.telegram.markup import Keyboard
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts


@dataclass(frozen=True, slots=True)
class PendingAsk:
    """One thing /pending shows: what it copies (a question, or a preflight's hold) and its
    id, its text and its own buttons (a tap on the copy is a tap on the original)."""

    of: CopyOf
    subject_id: int
    text: str
    markup: Keyboard


PENDING_TASKS = 50  # /pending looks at the owner's latest open tasks
# a task's status while it may wait on its owner: a turn's question, or the budget decision
_ASKING = ACTIVE_STATUSES | {TaskStatus.BUDGET_EXCEEDED}


async def waiting_asks(store: Store, texts: Texts, user_id: int) -> list[PendingAsk]:
    """Every approval, question and budget decision waiting for ``user_id``, oldest first,
    with its own buttons (the same as the original's: a tap on the copy is a tap there)."""
    owned = await store.tasks.list_for(user_id, sorted(_ASKING), PENDING_TASKS)
    by_id = {t.id: t for t in owned}
    questions = await store.questions.pending_of(list(by_id))
    return [_shown(texts, q, by_id[q.task_id]) for q in questions if _open(q, by_id[q.task_id])]


def _open(question: PendingQuestion, task: Task) -> bool:
    """A budget decision waits while its task is parked at the budget (a follow-up sent
    instead moved the task on); every other open question waits until it is settled."""
    return question.kind != QuestionKind.BUDGET or task.status is TaskStatus.BUDGET_EXCEEDED


def _shown(texts: Texts, question: PendingQuestion, task: Task) -> PendingAsk:
    """A waiting question's /pending copy: what its task waits for (named as on every
    surface), its text and buttons."""
    loc, payload, qid = task.locale, question.payload, question.id
    if question.kind == QuestionKind.APPROVAL:
        text, markup = str(payload.get("text", "")), approval_keyboard(texts, loc, qid)
    elif question.kind == QuestionKind.BUDGET:
        line = str(payload.get("line", ""))
        text = texts.raw(loc, "pending.budget", label=html.escape(task.label), line=line)
        markup = budget_keyboard(texts, loc, qid, float(payload.get("extend", 0)))
    else:
        item, selected = question_item(payload), list(payload.get("selected") or [])
        text = question_text(texts, task, item)
        markup = question_keyboard(texts, loc, qid, item, selected)
    wait = WaitState.asked(question.kind, bool(payload.get("check")))
    head = texts.get(loc, "pending.header", label=task.label, wait=texts.wait(loc, wait))
    return PendingAsk(CopyOf.QUESTION, qid, f"{head}\n{text}", markup)


async def edit_copies(
    store: Store, notifier: Notifier, qid: int, text: str, markup: Keyboard | None = None
) -> None:
    """Every live copy of question ``qid`` says what the original says now (without
    ``markup``: no buttons)."""
    for copy in await store.copies.of(CopyOf.QUESTION, qid):
        await notifier.edit_row(copy.chat_id, copy.row_id, text, markup)


async def record_copy(
    store: Store, notifier: Notifier, texts: Texts, qid: int, copy: PendingCopy
) -> None:
    """/pending showed a copy of question ``qid``: it is edited with the original from now on,
    and the copies it replaces (an older one in its chat, the oldest past the cap) say so. A
    question settled meanwhile: the copy says so."""
    question = await store.questions.get(qid)
    if question is None:
        return
    task = await store.tasks.get(question.task_id)
    loc = task.locale if task else "en"
    for old in await store.copies.add(CopyOf.QUESTION, qid, copy):
        key = "pending.shown_again" if old.chat_id == copy.chat_id else "pending.shown_elsewhere"
        await notifier.edit_row(old.chat_id, old.row_id, texts.get(loc, key))
    fresh = await store.questions.get(qid)
    if fresh is None or fresh.status == QuestionStatus.PENDING:
        return
    expired = fresh.status == QuestionStatus.EXPIRED
    line = texts.get(loc, "callback_approval.expired" if expired else "callback_approval.answered")
    await notifier.edit_row(copy.chat_id, copy.row_id, f"{first_line(fresh)}\n\n{line}")


def first_line(question: PendingQuestion) -> str:
    """What the question asked, without its buttons' hint (the closing edits' first part)."""
    payload = question.payload
    if question.kind == QuestionKind.APPROVAL:
        return str(payload.get("text", "")).rsplit("\n", 1)[0]
    if question.kind == QuestionKind.BUDGET:
        return str(payload.get("line", ""))
    return f"❓ {html.escape(str(payload.get('text', '')), quote=False)}"  # the agent's words
