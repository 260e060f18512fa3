"""/pending's copies, end to end through the real bot, the fake Bot API and a real SQLite file:
a copy recorded while a multi-select is toggled loses neither (the interleaving is driven with
an event: one side's first read of the question is held until the other side is done, through
SQLAlchemy's statement hook, no sleeps); /pending again in a chat retires the older copy there;
settling a question edits every live copy; a budget decision answered on its copy. And the
store underneath on SQLite and PostgreSQL: the copies kept per chat and in all, the toggles,
and the copies an upgrade finds on an open question's payload."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.util import await_only

from bot.approvals.answers import ApprovalAnswers
from bot.approvals.view import DONE
from bot.errors import UserInputError
from bot.events import ApprovalRequest, Question, SessionStarted, TurnFinished, Usage
from bot.models import CopyOf, QuestionKind, QuestionStatus
from bot.store import PendingCopy, Store, migrations
from bot.store.migrations import MIGRATIONS
from bot.store.schema import pending_questions, schema_version
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.postgres import STORE_KINDS, opened_store
from tests.test_approvals_e2e import answer_of, buttons, edited
from tests.test_buzzes import spent_budget
from tests.test_phone import SESSION, answer, buttons_data, settings, until
from tests.test_preflight_ask import ASK, agent_prompts, asked
from tests.test_preflight_money import PREFLIGHT, verdict
from tests.test_store import Clock

COLOURS = Question("Which colours?", "Colours", ("red", "green", "blue"), multi=True)
GROUP = -100500  # a group the owner also asks /pending in


def asks_colours() -> tuple:
    """A turn whose agent asks a multi-select question and goes on once it is answered."""
    asks = ApprovalRequest("AskUserQuestion", {}, "t1", "AskUserQuestion", questions=(COLOURS,))
    return (SessionStarted(SESSION, "fake-model"), asks, *answer("painted")[1:])


def asks_to_deploy() -> tuple:
    asks = ApprovalRequest("Bash", {"command": "make deploy"}, "t1", "Bash(make deploy)")
    return (SessionStarted(SESSION, "fake-model"), asks, *answer("deployed")[1:])


@contextlib.contextmanager
def first_read_held(
    store: Store, task: asyncio.Task[Any], release: asyncio.Event, read: str = "pending_questions"
) -> Iterator[asyncio.Event]:
    """Hold ``task`` right after its first read that ``read`` (a pattern) finds (of
    ``pending_questions`` unless told) until ``release``; the event returned is set once it is
    held. SQLAlchemy runs the hook in the greenlet of the task's statement, so ``await_only``
    suspends that task alone."""
    held = asyncio.Event()

    def hook(conn, cursor, statement, params, context, executemany):  # type: ignore[no-untyped-def]
        if held.is_set() or asyncio.current_task() is not task:
            return
        if statement.lstrip().upper().startswith("SELECT") and re.search(read, statement):
            held.set()
            await_only(release.wait())

    engine = store.engine.sync_engine
    sa.event.listen(engine, "after_cursor_execute", hook)
    try:
        yield held
    finally:
        sa.event.remove(engine, "after_cursor_execute", hook)


async def _interleaved(
    store: Store, first: Any, second: Any, read: str = "pending_questions"
) -> None:
    """``first`` starts and is held right after its first read of the question (or what
    ``read`` finds); ``second`` runs to its end meanwhile; then ``first`` goes on from what it
    read."""
    release = asyncio.Event()
    started = asyncio.get_running_loop().create_future()

    async def run_first() -> None:
        await started
        await first()

    task = asyncio.create_task(run_first())
    with first_read_held(store, task, release, read) as held:
        started.set_result(None)
        async with asyncio.timeout(10):
            await held.wait()
            await second()
            release.set()
            await task


@pytest.mark.parametrize("held", ["toggle", "copy"])
async def test_a_copy_and_a_toggle_at_once_lose_neither(tmp_path, workdir, held):
    """ "toggle": the tap read the question, then /pending recorded its copy, then the tap
    wrote its selection (main's payload write dropped the copy: it kept live buttons after the
    answer). "copy": the other way round (main's dropped the selection)."""
    engine = FakeEngine(asks_colours())
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.user_message("/detach paint the fence", OWNER)
            asked = await fake.wait_text(OWNER, "Which colours?", timeout_s=20)
            answers: ApprovalAnswers = app.dispatcher["answers"]
            (ask,) = await app.dispatcher["pending"].of(OWNER)
            qid, mark = ask.subject_id, len(fake.calls)
            row_id = await app.outbox.send(OWNER, ask.text, markup=ask.markup)
            copy = await fake.wait_text(OWNER, "Which colours?", after=mark)
            copy_id = copy.result["message_id"]

            async def record() -> None:
                await answers.copied(qid, OWNER, row_id)

            async def toggle() -> None:
                assert await answers.on_option(OWNER, qid, 1) == "callback_approval.selected"

            first, second = (toggle, record) if held == "toggle" else (record, toggle)
            await _interleaved(app.store, first, second)
            assert await answers.on_option(OWNER, qid, DONE) == "toast.answered"
            assert (await app.store.questions.get(qid)).answer == "green"  # the selection kept
            await edited(fake, asked.result["message_id"], "green", after=mark)
            await edited(fake, copy_id, "green", after=mark, timeout_s=10)  # the copy kept
            assert await app.outbox.idle(10)
            assert buttons_data(fake, copy_id) == []
            await fake.wait_text(OWNER, "painted", timeout_s=20)


async def test_done_after_a_toggle_it_raced_answers_with_that_selection(tmp_path, workdir):
    """Done read the question, then a tap selected another colour, then Done closed it: the
    answer holds both (main answered with the selection Done had read, losing "green")."""
    engine = FakeEngine(asks_colours())
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.user_message("/detach paint the fence", OWNER)
            await fake.wait_text(OWNER, "Which colours?", timeout_s=20)
            answers: ApprovalAnswers = app.dispatcher["answers"]
            (ask,) = await app.dispatcher["pending"].of(OWNER)
            qid = ask.subject_id
            assert await answers.on_option(OWNER, qid, 0) == "callback_approval.selected"

            async def done() -> None:
                assert await answers.on_option(OWNER, qid, DONE) == "toast.answered"

            async def toggle() -> None:
                assert await answers.on_option(OWNER, qid, 1) == "callback_approval.selected"

            await _interleaved(app.store, done, toggle)
            assert (await app.store.questions.get(qid)).answer == "red, green"
            await fake.wait_text(OWNER, "painted", timeout_s=20)


async def test_pending_again_keeps_one_live_copy_per_chat_and_settling_edits_each(
    tmp_path, workdir
):
    """/pending twice in the private chat: the first copy says it is shown again below and
    loses its buttons. Allow on the original edits the live copies of both chats."""
    engine = FakeEngine(asks_to_deploy())
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.user_message("/detach deploy it", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=20)
            shown = []
            for chat_id in (OWNER, OWNER, GROUP):
                mark = len(fake.calls)
                await fake.user_message("/pending", OWNER, chat_id=chat_id)
                shown.append(await fake.wait_text(chat_id, "make deploy", after=mark))
            older, newer, grouped = (c.result["message_id"] for c in shown)
            retired = await edited(fake, older, "Shown again below")
            assert retired.params["text"] == "⤵️ Shown again below."  # one line
            assert "reply_markup" not in retired.params  # no live button on it
            assert buttons(shown[1]) == buttons(ask)
            mark = len(fake.calls)
            await fake.press(OWNER, ask.result["message_id"], buttons(ask)["✅ Allow"], OWNER)
            await edited(fake, newer, "Allowed", after=mark)
            group_edit = await fake.wait_call(
                "editMessageText",
                lambda c: (
                    int(c.params["chat_id"]) == GROUP
                    and int(c.params["message_id"]) == grouped
                    and "Allowed" in c.params["text"]
                ),
                after=mark,
            )
            assert "reply_markup" not in group_edit.params
            await fake.wait_text(OWNER, "deployed", timeout_s=20)
            assert await app.outbox.idle(10)
            assert fake.find_message(OWNER, older)["text"] == "⤵️ Shown again below."
            assert buttons_data(fake, newer) == []
    assert engine.decisions == [True]


async def test_a_budget_decision_is_listed_and_answered_on_its_copy(tmp_path, workdir):
    """A task parked at its budget waits for Extend or Stop: /pending shows the card's two
    buttons; Stop tapped on the copy stops the task and edits the card and the copy."""
    engine = FakeEngine(spent_budget())
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.user_message("/claude max_usd=0.01 spend it", OWNER)
            card = await fake.wait_text(OWNER, "budget reached", timeout_s=20)
            card_id = card.result["message_id"]
            decision = card.params["reply_markup"]["inline_keyboard"][0]
            mark = len(fake.calls)
            await fake.user_message("/pending", OWNER)
            copy = await fake.wait_text(OWNER, "stopped at its budget", after=mark)
            assert "#1 spend" in copy.params["text"]
            assert copy.params["reply_markup"]["inline_keyboard"] == [decision]
            stop = decision[1]["callback_data"]
            await fake.press(OWNER, copy.result["message_id"], stop, OWNER)
            await until(lambda: "Stopped here at" in fake.find_message(OWNER, card_id)["text"])
            await edited(fake, copy.result["message_id"], "Stopped here at", after=mark)
            assert await app.outbox.idle(10)
            assert buttons_data(fake, copy.result["message_id"]) == []
            assert not any(d.startswith("bu:") for d in buttons_data(fake, card_id))
            await fake.user_message("/pending", OWNER)
            await fake.wait_text(OWNER, "Nothing asks for your answer", after=mark)


CARD = "spend-it</b> · budget reached"  # the head of the card that asks Extend or Stop


@pytest.mark.parametrize("flooded", [False, True], ids=["prompt", "flooded"])
async def test_a_follow_up_at_the_budget_again_leaves_one_decision_open(tmp_path, workdir, flooded):
    """A follow-up to a task parked at its budget hits the budget again: the newer card asks,
    the older decision expires (its card says so, without buttons), /pending lists only the
    newer, and Extend tapped on the older says so and extends nothing (main kept both open:
    two Extend/Stop for one task, and a tap on each extended twice). ``flooded``: Telegram
    holds the chat a second (a 429), so the follow-up's acknowledgement is sent after its turn
    ended, saying how."""
    engine = FakeEngine(spent_budget())
    async with FakeTelegram() as fake:
        if flooded:
            waits = "waiting for your budget decision"
            held = "Too Many Requests: retry after 1"
            fake.fail_next("editMessageText", 429, held, 1, lambda p: waits in p.get("text", ""))
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.user_message("/claude max_usd=0.01 spend it", OWNER)
            older = await fake.wait_text(OWNER, CARD, timeout_s=20)
            older_id, mark = older.result["message_id"], len(fake.calls)
            await fake.user_message("spend more", OWNER, reply_to_message_id=older_id)
            # the card, not the follow-up's acknowledgement: sent after the turn ended (the
            # outbox busy with the chat), that goes out saying "follow-up · 💸 budget reached"
            newer = await fake.wait_text(OWNER, CARD, after=mark, timeout_s=20)
            if flooded:  # the interleaving that once took the acknowledgement for the card
                await fake.wait_text(OWNER, "follow-up · 💸 budget reached", after=mark)
            await edited(fake, older_id, "a newer budget question replaced", after=mark)
            assert await app.outbox.idle(10)
            assert not any(d.startswith("bu:") for d in buttons_data(fake, older_id))
            (ask,) = await app.dispatcher["pending"].of(OWNER)
            decision = newer.params["reply_markup"]["inline_keyboard"][0]
            shown = [b.callback_data for b in ask.markup.rows[0]]
            assert shown == [b["callback_data"] for b in decision]
            (task,) = await app.store.tasks.list_for(OWNER)
            extend = older.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
            query = await fake.press(OWNER, older_id, extend, OWNER)
            assert await answer_of(fake, query) == "This request has expired."
            assert (await app.store.tasks.get(task.id)).max_usd == task.max_usd


def turn(cost_usd: float, subtype: str | None) -> tuple:
    """A turn that cost ``cost_usd`` and ended as ``subtype`` says (None: it answered)."""
    finished = TurnFinished(
        is_error=subtype is not None,
        result_text="all wrapped up",
        session_id=SESSION,
        cost_usd=cost_usd,
        usage=Usage(input_tokens=10, output_tokens=5),
        subtype=subtype or "",
    )
    return (SessionStarted(SESSION, "fake-model"), finished)


async def test_a_budget_decision_a_follow_up_moved_past_expires_when_tapped(tmp_path, workdir):
    """A follow-up moved a task parked at its budget on (it ended well): Extend tapped on the
    old card says the request expired, raises nothing and queues nothing, and the card loses
    its buttons (main extended the budget and ran a turn more)."""
    engine = FakeEngine(
        lambda spec: turn(0.006, "error_max_budget_usd") if spec.turn_id == 1 else turn(0.001, None)
    )
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.user_message("/claude max_usd=0.01 spend it", OWNER)
            card = await fake.wait_text(OWNER, "budget reached", timeout_s=20)
            card_id = card.result["message_id"]
            await fake.user_message("just finish", OWNER, reply_to_message_id=card_id)
            (task,) = await app.store.tasks.list_for(OWNER)
            await until(lambda: len(engine.specs) == 2)
            await fake.wait_text(OWNER, "all wrapped up", timeout_s=20)
            assert await app.dispatcher["pending"].of(OWNER) == []
            extend = card.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
            query = await fake.press(OWNER, card_id, extend, OWNER)
            assert await answer_of(fake, query) == "This request has expired."
            await until(
                lambda: "the task went on since" in fake.find_message(OWNER, card_id)["text"]
            )
            assert not any(d.startswith("bu:") for d in buttons_data(fake, card_id))
            assert (await app.store.tasks.get(task.id)).max_usd == task.max_usd
            assert len(await app.store.tasks.turns_of(task.id)) == 2


def spent_then_done(spec: Any) -> tuple:
    """The first turn stops at its budget; every later one ends well."""
    return turn(0.006, "error_max_budget_usd") if spec.turn_id == 1 else turn(0.001, None)


async def test_extend_tapped_again_on_its_copy_says_it_was_answered(tmp_path, workdir):
    """Extend tapped on the card, then again on the /pending copy: the second tap says the
    decision was answered, and extends nothing more (main said "expired": the task's state
    was read before the question's own)."""
    engine = FakeEngine(spent_then_done)
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.user_message("/claude max_usd=0.01 spend it", OWNER)
            card = await fake.wait_text(OWNER, "budget reached", timeout_s=20)
            mark = len(fake.calls)
            await fake.user_message("/pending", OWNER)
            copy = await fake.wait_text(OWNER, "stopped at its budget", after=mark)
            extend = card.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
            await answer_of(fake, await fake.press(OWNER, card.result["message_id"], extend, OWNER))
            (task,) = await app.store.tasks.list_for(OWNER)
            query = await fake.press(OWNER, copy.result["message_id"], extend, OWNER)
            assert await answer_of(fake, query) == "Answered already."
            await fake.wait_text(OWNER, "all wrapped up", timeout_s=20)
            assert (await app.store.tasks.get(task.id)).max_usd == task.max_usd
            assert len(await app.store.tasks.turns_of(task.id)) == 2


async def test_a_follow_up_between_extends_read_and_its_answer_wins_whole(tmp_path, workdir):
    """Extend read the task stopped at its budget; a follow-up moved it on before Extend
    closed the question: Extend says the request expired, raises nothing and queues nothing
    (main raised the budget and queued a continue turn behind the follow-up)."""
    engine = FakeEngine(spent_then_done)
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.user_message("/claude max_usd=0.01 spend it", OWNER)
            card = await fake.wait_text(OWNER, "budget reached", timeout_s=20)
            (task,) = await app.store.tasks.list_for(OWNER)
            (ask,) = await app.dispatcher["pending"].of(OWNER)
            outcome: list[str] = []

            async def extend() -> None:
                with pytest.raises(UserInputError) as refused:
                    await app.dispatcher["card"].answer_budget(OWNER, ask.subject_id, True)
                outcome.append(refused.value.key)

            async def follow_up() -> None:
                reply_to = card.result["message_id"]
                await fake.user_message("just finish", OWNER, reply_to_message_id=reply_to)
                await until(lambda: len(engine.specs) == 2)

            await _interleaved(app.store, extend, follow_up, r"\bFROM tasks\b")
            assert outcome == ["callback_approval.expired"]
            await fake.wait_text(OWNER, "all wrapped up", timeout_s=20)
            assert (await app.store.tasks.get(task.id)).max_usd == task.max_usd
            assert len(await app.store.tasks.turns_of(task.id)) == 2
            assert (await app.store.questions.get(ask.subject_id)).answer == "superseded"


async def test_a_preflight_estimate_over_the_budget_is_answered_on_its_copy(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """A task its preflight holds (the estimate is over its budget: Start anyway or Drop)
    waits on the owner: /pending shows it with the goal and both buttons; Drop tapped on
    the copy takes the buttons off the original and the copy."""
    anthropic.script(PREFLIGHT, verdict(verdict="go", estimate_usd=3.0, estimate_minutes=20))
    async with FakeTelegram() as fake:
        custom = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(custom, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach max_usd=1 MARK-DEAR rewrite the parser", OWNER)
            asked = await fake.wait_text(OWNER, "estimates this task at about $3.00", timeout_s=20)
            mark = len(fake.calls)
            await fake.user_message("/pending", OWNER)
            copy = await fake.wait_text(OWNER, "estimates this task", after=mark)
            assert "rewrite the parser" in copy.params["text"]  # which task it is
            assert buttons(copy) == buttons(asked)
            copy_id = copy.result["message_id"]
            query = await fake.press(OWNER, copy_id, buttons(copy)["🗑 Drop"], OWNER)
            assert await answer_of(fake, query) == "Dropped: not started"
            await until(lambda: buttons_data(fake, copy_id) == [])
            await until(lambda: buttons_data(fake, asked.result["message_id"]) == [])
            assert await app.store.tasks.list_for(None) == []
            mark = len(fake.calls)
            await fake.user_message("/pending", OWNER)
            await fake.wait_text(OWNER, "Nothing asks for your answer", after=mark)


async def test_a_reply_to_a_preflight_questions_copy_answers_it(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """The copy /pending shows of a preflight's question (in a group) says "reply with your
    own": a reply to it there answers the question with those words and starts the task, and
    the original and the copy lose their buttons (main told the owner the reply was to no
    task)."""
    anthropic.script(PREFLIGHT, [{"text": json.dumps(ASK)}])
    anthropic.script("MARK-COPY", [{"text": "Fixed test_y."}])
    async with FakeTelegram() as fake:
        custom = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(custom, agent_env):
            question = await asked(fake, "/detach MARK-COPY fix the tests")
            mark = len(fake.calls)
            await fake.user_message("/pending", OWNER, chat_id=GROUP)
            copy = await fake.wait_text(GROUP, "Which tests?", after=mark)
            assert "reply with your own" in copy.params["text"]
            copy_id = copy.result["message_id"]
            await fake.user_message(
                "only test_y", OWNER, chat_id=GROUP, reply_to_message_id=copy_id
            )
            await fake.wait_text(OWNER, "Fixed test_y.", timeout_s=60)
            [prompt] = agent_prompts(anthropic, "MARK-COPY")
            assert "Which tests? → only test_y" in prompt
            await until(lambda: "reply_markup" not in fake.find_message(GROUP, copy_id))
            await until(lambda: buttons_data(fake, question.result["message_id"]) == [])
            assert not [
                c
                for c in fake.calls[mark:]
                if "does not belong to a task" in str(c.params.get("text"))
            ]


@pytest.fixture(params=STORE_KINDS)
async def store(request, tmp_path):  # type: ignore[no-untyped-def]
    async with opened_store(request.param, tmp_path, Clock()) as opened:
        yield opened


async def test_copies_are_one_per_chat_and_five_in_all(store):
    question = await store.questions.create(1, 1, QuestionKind.APPROVAL, {"text": "?"}, None)
    qid = question.id
    assert await store.copies.add(CopyOf.QUESTION, qid, PendingCopy(10, 1)) == []
    assert await store.copies.add(CopyOf.QUESTION, qid, PendingCopy(10, 2)) == [PendingCopy(10, 1)]
    for chat in range(11, 16):
        retired = await store.copies.add(CopyOf.QUESTION, qid, PendingCopy(chat, chat * 10))
    assert retired == [PendingCopy(10, 2)]  # the oldest past five
    live = await store.copies.of(CopyOf.QUESTION, qid)
    assert live == [PendingCopy(c, c * 10) for c in range(11, 16)]
    assert await store.copies.of(CopyOf.HOLD, qid) == []  # a hold's copies are its own


async def test_toggles_at_once_keep_every_selection(store):
    payload = {"text": "?", "header": "h", "options": ["a", "b", "c"], "multi": True}
    question = await store.questions.create(1, 1, QuestionKind.QUESTION, payload, None)
    await asyncio.gather(*(store.questions.toggle(question.id, i) for i in range(3)))
    stored = (await store.questions.get(question.id)).payload
    assert sorted(stored["selected"]) == [0, 1, 2] and stored["text"] == "?"
    assert sorted(await store.questions.toggle(question.id, 1) or []) == [0, 2]  # unselected
    await store.questions.resolve(question.id, QuestionStatus.ANSWERED, "a, c")
    assert await store.questions.toggle(question.id, 1) is None  # closed: nothing toggles


async def test_done_and_toggles_at_once_answer_with_what_was_selected_before_it(store):
    """Done closes the question with the selection as it stands then, toggles at once either
    commit before it (and are in the answer) or find it closed (and say so)."""
    payload = {"text": "?", "header": "h", "options": ["a", "b", "c"], "multi": True}
    question = await store.questions.create(1, 1, QuestionKind.QUESTION, payload, None)
    await store.questions.toggle(question.id, 2)
    toggles = [store.questions.toggle(question.id, i) for i in (0, 1)]
    *toggled, answer = await asyncio.gather(
        *toggles, store.questions.resolve_selected(question.id, ("a", "b", "c"))
    )
    kept = [i for i, t in zip((0, 1), toggled, strict=True) if t is not None]
    assert answer == ", ".join("abc"[i] for i in sorted([*kept, 2]))
    assert (await store.questions.get(question.id)).answer == answer
    assert await store.questions.resolve_selected(question.id, ("a", "b", "c")) is None


async def test_a_newer_budget_question_supersedes_the_open_ones_only(store):
    older = await store.questions.create(1, 1, QuestionKind.BUDGET, {"line": "a"}, None)
    answered = await store.questions.create(1, 1, QuestionKind.BUDGET, {"line": "b"}, None)
    await store.questions.resolve(answered.id, QuestionStatus.ANSWERED, "stop")
    approval = await store.questions.create(1, 1, QuestionKind.APPROVAL, {"text": "?"}, None)
    other = await store.questions.create(2, 2, QuestionKind.BUDGET, {"line": "c"}, None)
    (gone,) = await store.questions.supersede(1, QuestionKind.BUDGET)
    assert gone.id == older.id and gone.payload == {"line": "a"}
    assert (await store.questions.get(older.id)).status == QuestionStatus.EXPIRED
    assert (await store.questions.get(older.id)).answer == "superseded"
    assert (await store.questions.get(answered.id)).answer == "stop"
    for still in (approval, other):
        assert (await store.questions.get(still.id)).status == QuestionStatus.PENDING
    assert await store.questions.supersede(1, QuestionKind.BUDGET) == []


async def test_the_upgrade_moves_an_open_questions_copies_to_their_table(tmp_path):
    """A question open across the upgrade keeps the copies its payload named (a settled one's
    are done with)."""
    url = f"sqlite+aiosqlite:///{tmp_path}/old.sqlite"
    engine = sa.create_engine(f"sqlite:///{tmp_path}/old.sqlite")
    with engine.begin() as conn:
        schema_version.create(conn)
        before = MIGRATIONS.index(migrations._v29)  # the version before it
        for step in MIGRATIONS[:before]:
            step(conn)
        conn.execute(schema_version.insert().values(version=before))
        for status in ("pending", "answered"):
            conn.execute(
                pending_questions.insert().values(
                    task_id=1,
                    kind="approval",
                    status=status,
                    payload=json.dumps({"text": "?", "copies": [[10, 3], [11, 4]]}),
                    created_at=sa.func.now(),
                )
            )
    engine.dispose()
    store = await Store.open(url, Clock())
    try:
        assert await store.copies.of(CopyOf.QUESTION, 1) == [PendingCopy(10, 3), PendingCopy(11, 4)]
        assert await store.copies.of(CopyOf.QUESTION, 2) == []
    finally:
        await store.close()
