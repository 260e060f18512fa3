"""The copies of an open approval or question that /pending showed: kept on the question's
payload (``copies``: [chat, outbox row] pairs), and edited wherever the original is (an
answer, a timeout, the turn's end, a restart), so no copy keeps live buttons or says it
waits once its question is settled."""

from __future__ import annotations

from bot.models import QuestionKind, QuestionStatus
from bot.store import PendingQuestion, Store
from bot.telegram.markup import Keyboard
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts


def copies(question: PendingQuestion) -> list[tuple[int, int]]:
    """The (chat, outbox row) of each copy of the question that /pending showed."""
    return [(int(c), int(r)) for c, r in question.payload.get("copies") or []]


async def edit_copies(
    notifier: Notifier, question: PendingQuestion, text: str, markup: Keyboard | None = None
) -> None:
    """Every copy says what the original says now (without ``markup``: no buttons)."""
    for chat_id, row_id in copies(question):
        await notifier.edit_row(chat_id, row_id, text, markup)


async def record_copy(
    store: Store, notifier: Notifier, texts: Texts, qid: int, copy: tuple[int, int]
) -> None:
    """/pending showed a copy of question ``qid`` (``copy``: its chat and outbox row): it is
    edited with the original from now on. A question settled meanwhile: the copy says so."""
    question = await store.questions.get(qid)
    if question is None:
        return
    shown = [*copies(question), copy]
    await store.questions.update_payload(
        qid, {**question.payload, "copies": [list(c) for c in shown]}
    )
    fresh = await store.questions.get(qid)
    if fresh is None or fresh.status == QuestionStatus.PENDING:
        return
    task = await store.tasks.get(fresh.task_id)
    expired = fresh.status == QuestionStatus.EXPIRED
    line = texts.get(
        task.locale if task else "en",
        "callback_approval.expired" if expired else "callback_approval.answered",
    )
    await notifier.edit_row(copy[0], copy[1], f"{first_line(fresh)}\n\n{line}")


def first_line(question: PendingQuestion) -> str:
    """What the question asked, without its buttons' hint (the closing edits' first part)."""
    payload = question.payload
    if question.kind == QuestionKind.APPROVAL:
        return str(payload.get("text", "")).rsplit("\n", 1)[0]
    return f"❓ {payload.get('text', '')}"
