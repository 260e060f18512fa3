"""Presets per chat, model= at capture, the daily cap and kill switch, the spend ledger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.models import NewTask, TaskKind, TaskStatus
from bot.settings import Settings
from bot.store import Store, TurnOutcome
from tests.support.fake_telegram import TOKEN
from tests.support.harness import app_in_own_task
from tests.support.recording_session import RecordingSession
from tests.test_handlers import OWNER, feed, message, press


def app_for(tmp_path, claude_bin, agent_env, workdir, **extra):
    settings = Settings(
        _env_file=None,
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER}),
        data_dir=tmp_path / "data",
        claude_bin=claude_bin,
        workdir=workdir,
        **extra,
    )  # type: ignore[call-arg]
    return app_in_own_task(settings, session=RecordingSession(), environ=agent_env)


@pytest.fixture
async def app(tmp_path, claude_bin, agent_env, workdir):
    async with app_for(tmp_path, claude_bin, agent_env, workdir) as app:
        yield app


async def test_model_menu_fuzzy_choice_and_candidates(app):
    session = await feed(app, message("/model"))
    menu = session.sent()[-1]
    assert "No model chosen" in menu.text
    assert {b[0].callback_data for b in menu.reply_markup.inline_keyboard} >= {
        "md:opus",
        "md:sonnet",
        "md:gpt-5.5",
    }
    session = await feed(app, message("/model sonet"))
    assert "Model for this chat: <b>sonnet</b>" in session.new_texts()
    assert await app.store.chats.preset(OWNER) == "sonnet"
    session = await feed(app, message("/model gpt"))
    pick = session.sent()[-1]
    assert "Which one" in pick.text and len(pick.reply_markup.inline_keyboard) == 2
    session = await feed(app, press("md:gpt-5.5"))
    assert await app.store.chats.preset(OWNER) == "gpt-5.5"
    session = await feed(app, message("/model llama-70b"))
    assert "No model preset matches" in session.new_texts() and "Closest" in session.new_texts()
    session = await feed(app, message("/model"))
    assert "<b>gpt-5.5</b>" in session.sent()[-1].text


async def test_model_option_is_resolved_at_capture(app):
    await feed(app, message("/detach model=opsu max_usd=2.5 tidy up"))
    task = await app.store.tasks.get(1)
    assert (task.preset, task.model, task.engine, task.max_usd) == ("opus", "opus", "claude", 2.5)
    session = await feed(app, message("/claude model=gpt-5.5 hi"))
    assert "runs on codex, not claude" in session.new_texts()
    session = await feed(app, message("/detach model=gpt hi"))
    assert "could be gpt-5.5, gpt-6.2-sol" in session.new_texts()
    session = await feed(app, message("/detach max_usd=lots hi"))
    assert "not an amount" in session.new_texts()
    assert [t.id for t in await app.store.tasks.list_for(None)] == [1]


async def test_chat_preset_is_the_default_for_new_tasks(app):
    await app.store.chats.set_preset(OWNER, "haiku")
    await feed(app, message("/claude explain"))
    assert (await app.store.tasks.get(1)).model == "haiku"


async def test_kill_switch_pauses_all_new_work(tmp_path, claude_bin, agent_env, workdir):
    async with app_for(tmp_path, claude_bin, agent_env, workdir, daily_cap_usd=0) as app:
        session = await feed(app, message("/detach do it"))
        assert "All new work is paused" in session.new_texts()
        assert await app.store.tasks.list_for(None) == []


async def test_daily_cap_refuses_with_the_numbers(tmp_path, claude_bin, agent_env, workdir):
    async with app_for(tmp_path, claude_bin, agent_env, workdir, daily_cap_usd=1.0) as app:
        await app.store.spend.record(OWNER, 99, 1, 1.0, 10, 10)
        await feed(app, message("/detach at the ceiling"))  # spent == cap: inclusive, allowed
        assert len(await app.store.tasks.list_for(None)) == 1
        await app.store.spend.record(OWNER, 99, 2, 0.25, 10, 10)
        session = await feed(app, message("/detach above it"))
        assert "$1.25 of your $1.00 daily cap" in session.new_texts()
        assert len(await app.store.tasks.list_for(None)) == 1


async def test_ledger_totals_across_days(tmp_path):
    now = datetime(2026, 11, 29, 23, 30, tzinfo=UTC)

    def clock() -> datetime:
        return now

    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/l.sqlite", clock)
    try:
        await store.spend.record(1, 1, 1, 0.5, 1, 1)
        now += timedelta(hours=1)  # the next day
        await store.spend.record(1, 1, 2, 0.25, 1, 1)
        await store.spend.record(1, 2, 3, 0.25, 1, 1)
        await store.spend.record(2, 3, 4, 7.0, 1, 1)
        assert await store.spend.day_total(1, "2026-11-29") == 0.5
        assert await store.spend.day_total(1, "2026-11-30") == 0.5
        assert await store.spend.by_day(1, "2026-11-01") == {"2026-11-29": 0.5, "2026-11-30": 0.5}
        assert store.spend.today() == "2026-11-30"
    finally:
        await store.close()


async def test_spend_command(app):
    task, _ = await app.store.tasks.create(
        NewTask(
            owner_id=OWNER,
            chat_id=OWNER,
            engine="claude",
            kind=TaskKind.DETACH,
            prompt="costly thing",
            cwd=app.settings.default_workdir,
        ),
        "costly-thing",
    )
    await app.store.spend.record(OWNER, task.id, 1, 0.75, 10, 10)
    await app.store.tasks.finish_turn(
        await app.store.tasks.last_turn(task.id), TurnOutcome(TaskStatus.DONE, cost_usd=0.75)
    )
    session = await feed(app, message("/spend"))
    text = session.texts()[-1]
    assert "today $0.75" in text and "#1 costly-thing: $0.75" in text
