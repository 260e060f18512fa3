"""The copies of an open approval, question or budget ask that /pending showed: rows of their
own (``store.copies``), the newest one per chat, edited wherever the original is (an answer, a
timeout, the turn's end, a restart), so no copy keeps live buttons or says it waits once its
question is settled. A copy that a newer one replaces says so in one line, without buttons."""

from __future__ import annotations

from dataclasses import dataclass

from bot.models import CopyOf, QuestionKind, QuestionStatus
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
    return f"❓ {payload.get('text', '')}"
