"""The fast tier: the real dispatcher, notifier and outbox with an engine that replays a
recorded event stream — no agent binary, so these run in a fraction of a second each."""

from __future__ import annotations

import asyncio

from bot.events import SessionStarted, TextEmitted, ToolCalled, ToolFinished, TurnFinished, Usage
from bot.models import Phrase, TaskStatus
from bot.settings import Settings
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import TOKEN
from tests.support.harness import app_in_own_task, wait_sent
from tests.support.recording_session import RecordingSession
from tests.test_handlers import OWNER, feed, message

SESSION = "0f0e0d0c-0b0a-4908-8706-050403020100"
RECORDED = (
    SessionStarted(SESSION, "fake-model"),
    TextEmitted("Looking at the build."),
    ToolCalled("t1", "Bash", "make test"),
    ToolFinished("t1", False, "ok"),
    TurnFinished(
        is_error=False,
        result_text="All **green**: 42 tests.",
        session_id=SESSION,
        cost_usd=0.0123,
        usage=Usage(input_tokens=10, output_tokens=5),
    ),
)


def _settings(tmp_path, workdir) -> Settings:  # type: ignore[no-untyped-def]
    return Settings(
        _env_file=None,
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER}),
        data_dir=tmp_path / "data",
        workdir=workdir,
        outbox_chat_interval_s=0,
    )  # type: ignore[call-arg]


async def test_a_turn_of_a_replayed_engine_reports_through_the_real_bot(tmp_path, workdir):
    engine = FakeEngine(RECORDED)
    async with app_in_own_task(
        _settings(tmp_path, workdir), session=RecordingSession(), executors={"claude": engine}
    ) as app:
        session = await feed(app, message("/claude check the build"))
        card = await wait_sent(session, lambda c: "All <b>green</b>: 42 tests." in c.text, 10)
        assert "#1" in card.text and "$0.012" in card.text
        async with asyncio.timeout(10):
            while (await app.store.tasks.get(1)).status is not TaskStatus.DONE:
                await asyncio.sleep(0.02)
        task = await app.store.tasks.get(1)
        assert task.session_id == SESSION and task.total_cost_usd == 0.0123
        assert engine.specs[0].prompt == "check the build"
        session = await feed(app, message("/status"))
        assert "claude fake" in session.new_texts()


async def test_an_engine_missing_from_this_machine_is_refused_clearly(tmp_path, workdir):
    async with app_in_own_task(
        _settings(tmp_path, workdir),
        session=RecordingSession(),
        executors={"claude": FakeEngine(RECORDED)},
    ) as app:
        session = await feed(app, message("/codex do something"))
        assert "codex" in session.new_texts()
        assert await app.store.tasks.get(1) is None


class _Held:
    """An engine whose turns wait until released: one turn occupies the only slot."""

    engine = "claude"

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.prompts: list[str] = []

    async def probe(self) -> Phrase:
        return Phrase("probe.version", {"engine": "claude", "version": "held"})

    def sandbox_problem(self) -> None:
        return None

    async def run(self, spec, approver, steering=None, ready=None):  # type: ignore[no-untyped-def]
        if ready is not None:
            await ready()
        self.prompts.append(spec.prompt)
        async with asyncio.timeout(20):
            await self.release.wait()
        yield TurnFinished(False, f"{spec.prompt} done", SESSION, 0.0, Usage(1, 1))


async def test_a_new_task_with_a_free_slot_is_created_running_and_waits_when_none_is(
    tmp_path, workdir
):
    """A new task's first turn is claimed in the transaction that creates it when a slot is free
    (it is running when ``start`` returns: one commit and one hop fewer before its agent); with
    the cap reached it is created queued and starts once the slot frees, never beside it."""
    from bot.models import NewTask, TaskKind

    engine = _Held()
    settings = _settings(tmp_path, workdir).model_copy(update={"max_concurrent_turns": 1})
    async with app_in_own_task(
        settings, session=RecordingSession(), executors={"claude": engine}
    ) as app:

        def new(prompt: str) -> NewTask:
            return NewTask(OWNER, OWNER, "claude", TaskKind.SESSION, prompt, workdir)

        first = await app.uses.create.start(new("first"))
        row = await app.store.tasks.get(first.id)
        assert row.status is TaskStatus.RUNNING
        assert (await app.store.tasks.first_turn(first.id)).runner == app.pool.identity
        second = await app.uses.create.start(new("second"))
        assert (await app.store.tasks.get(second.id)).status is TaskStatus.QUEUED
        async with asyncio.timeout(10):
            while engine.prompts != ["first"]:
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)  # bounded: the second must not start beside the first
        assert engine.prompts == ["first"]
        engine.release.set()
        async with asyncio.timeout(10):
            while (await app.store.tasks.get(second.id)).status is not TaskStatus.DONE:
                await asyncio.sleep(0.02)
        assert engine.prompts == ["first", "second"]
        assert (await app.store.tasks.get(first.id)).status is TaskStatus.DONE


async def test_a_command_handled_twice_starts_one_task(tmp_path, workdir):
    """The message a task command came in starts one task however often it is handled (its
    update delivered again after a restart): the second handling finds the first's task. The
    lookup runs beside the planning; a command the planning refuses says so, and starts none."""
    from bot.errors import UserInputError
    from bot.models import TaskKind
    from bot.tasks.requests import ChatRequest

    engine = FakeEngine(RECORDED)
    async with app_in_own_task(
        _settings(tmp_path, workdir), session=RecordingSession(), executors={"claude": engine}
    ) as app:

        def request(text: str) -> ChatRequest:
            return ChatRequest(
                OWNER, OWNER, TaskKind.SESSION, text, "en", "claude", "claude", reply_to=77
            )

        first = await app.uses.create.from_chat(request("check the build"))
        again = await app.uses.create.from_chat(request("check the build"))
        assert first is not None and again is not None and again.id == first.id
        try:
            await app.uses.create.from_chat(request("mode=nonsense check the build"))
        except UserInputError:
            pass
        else:
            raise AssertionError("an unknown mode was taken")
        assert [t.id for t in await app.store.tasks.list_for(OWNER)] == [first.id]
