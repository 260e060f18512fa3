"""The fast tier: the real dispatcher, notifier and outbox with an engine that replays a
recorded event stream — no agent binary, so these run in a fraction of a second each."""

from __future__ import annotations

import asyncio

from bot.models import (
    SessionStarted,
    TaskStatus,
    TextEmitted,
    ToolCalled,
    ToolFinished,
    TurnFinished,
    Usage,
)
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
        assert "#1" in card.text and "$0.0123" in card.text
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
