"""The use cases surfaces read the record through keep each user to their own: another user's
task, question, transcript, draft or schedule reads exactly like a missing one (issue #52)."""

from __future__ import annotations

import pytest

from bot.errors import UserInputError
from bot.models import QuestionKind
from bot.rows import DraftStatus
from bot.store import Store
from bot.tasks.drafting import DraftBook
from bot.tasks.reads import TaskReads
from bot.tasks.scheduling import ScheduleBook
from tests.test_store import Clock, new

OWNER, OTHER = 1, 2


@pytest.fixture
async def store(tmp_path):  # type: ignore[no-untyped-def]
    opened = await Store.open(f"sqlite:///{tmp_path / 'reads.sqlite'}", Clock())
    yield opened
    await opened.close()


async def test_task_reads_show_the_owner_their_task_and_another_user_nothing(store):
    task, turn = await store.tasks.create(new("the owner's secret goal", owner=OWNER), "secret")
    await store.transcript.append(task.id, turn.id, [("TextEmitted", {"text": "hello"})])
    asked = await store.questions.create(task.id, turn.id, QuestionKind.APPROVAL, {}, None)
    reads = TaskReads(store)

    [row] = await reads.rows(OWNER, archived=False, limit=10)
    assert row.task.id == task.id and row.worktree is None
    page = await reads.page(OWNER, task.id)
    assert page is not None and [t.id for t in page.turns] == [turn.id]
    assert [q.id for q in page.pending] == [asked.id]
    assert [x.body for x in await reads.lines(OWNER, task.id, 0, 10)] == [{"text": "hello"}]
    assert await reads.question(OWNER, task.id, asked.id) == asked

    assert await reads.rows(OTHER, archived=False, limit=10) == []
    assert await reads.own(OTHER, task.id) is None
    assert await reads.page(OTHER, task.id) is None
    assert await reads.lines(OTHER, task.id, 0, 10) == []
    assert await reads.question(OTHER, task.id, asked.id) is None
    assert await reads.question(OWNER, task.id + 1, asked.id) is None  # not that task's


async def test_a_draft_is_the_owners_while_pending_and_closes_once(store):
    book = DraftBook(store)
    draft = await book.create(
        owner_id=OWNER, chat_id=OWNER, message_id=5, locale="en", text="hi", notes=(), task_id=None
    )
    assert await book.pending(OTHER, draft.id) is None
    assert await book.pending(OWNER, draft.id) == draft
    assert await book.close(draft, DraftStatus.STARTED)
    assert not await book.close(draft, DraftStatus.CANCELLED)
    assert await book.pending(OWNER, draft.id) is None


async def test_another_users_schedule_reads_as_missing(store):
    book = ScheduleBook(store)
    schedule = await book.add(OWNER, OWNER, ("0 9 * * *", None), "UTC", "tidy up", "en")
    assert (await book.own(OWNER, schedule.id)).id == schedule.id
    with pytest.raises(UserInputError) as other:
        await book.own(OTHER, schedule.id)
    assert other.value.key == "schedule.not_found"
    await book.delete(schedule)
    with pytest.raises(UserInputError):
        await book.own(OWNER, schedule.id)
