"""Unit tier: updates fed into the real Dispatcher (built by the composition root) with a
recording session; a real SQLite file; no agent turn runs here unless a test asks for one."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import pytest
from aiogram.types import Update

from bot.models import NewTask, TaskKind, TaskStatus
from bot.settings import Settings
from bot.telegram.texts import Texts
from tests.support.fake_telegram import TOKEN
from tests.support.harness import app_in_own_task
from tests.support.recording_session import RecordingSession

OWNER, OTHER, STRANGER = 111, 222, 999
_ids = itertools.count(1)


def message(
    text: str, user: int = OWNER, reply_to: int | None = None, language: str = "en"
) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "message_id": next(_ids),
        "date": int(time.time()),
        "text": text,
        "chat": {"id": user, "type": "private"},
        "from": {"id": user, "is_bot": False, "first_name": "U", "language_code": language},
    }
    if text.startswith("/"):
        msg["entities"] = [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}]
    if reply_to is not None:
        msg["reply_to_message"] = {
            "message_id": reply_to,
            "date": int(time.time()),
            "chat": {"id": user, "type": "private"},
            "from": {"id": 123456, "is_bot": True, "first_name": "D"},
            "text": "earlier",
        }
    return {"update_id": next(_ids), "message": msg}


def press(data: str, user: int = OWNER, message_id: int = 1) -> dict[str, Any]:
    return {
        "update_id": next(_ids),
        "callback_query": {
            "id": f"cb{next(_ids)}",
            "chat_instance": "ci",
            "data": data,
            "from": {"id": user, "is_bot": False, "first_name": "U"},
            "message": {
                "message_id": message_id,
                "date": int(time.time()),
                "chat": {"id": user, "type": "private"},
                "text": "x",
            },
        },
    }


@pytest.fixture
async def app(tmp_path, claude_bin, agent_env, workdir):
    settings = Settings(
        _env_file=None,
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER, OTHER}),
        data_dir=tmp_path / "data",
        claude_bin=claude_bin,
        workdir=workdir,
        max_prompt_chars=1000,
        outbox_chat_interval_s=0,
    )  # type: ignore[call-arg]
    session = RecordingSession()
    async with app_in_own_task(settings, session=session, environ=agent_env) as app:
        yield app


async def feed(app, raw: dict[str, Any]) -> RecordingSession:
    session: RecordingSession = app.bot.session
    session.mark = len(session.calls)
    await app.dispatcher.feed_update(app.bot, Update.model_validate(raw, context={"bot": app.bot}))
    assert await app.outbox.idle(10), "replies go through the outbox and are delivered"
    return session


async def test_start_and_help(app):
    session = await feed(app, message("/start"))
    session = await feed(app, message("/help"))
    assert "Detach" in session.texts()[0] and "/detach" in session.texts()[1]


async def test_startup_sets_the_command_menu_in_every_language(app):
    await app.dispatcher.emit_startup(bot=app.bot)  # the menu is set beside polling
    async with asyncio.timeout(10):
        while len(app.bot.session.sent("SetMyCommands")) < 3:
            await asyncio.sleep(0.02)
    calls = {c.language_code: c for c in app.bot.session.sent("SetMyCommands")}
    assert set(calls) == {None, "en", "ru"}
    assert {c.command for c in calls[None].commands} >= {"detach", "claude", "tasks", "cancel"}
    russian = {c.command: c.description for c in calls["ru"].commands}
    assert russian["tasks"] == "Идущие, ожидающие и недавние задачи"


async def test_the_users_language_picks_the_texts_and_lang_overrides_it(app):
    session = await feed(app, message("/detach", language="ru"))
    assert "Скажите, что сделать" in session.new_texts()
    session = await feed(app, message("/lang en", language="ru"))
    assert session.texts()[-1] == "Language: <b>English</b>."
    session = await feed(app, message("/detach", language="ru"))
    assert "Tell me what to do" in session.new_texts()
    session = await feed(app, message("/lang klingon"))
    assert "No such language" in session.new_texts() and "en, ru" in session.new_texts()
    session = await feed(app, message("/lang"))
    buttons = session.sent("SendMessage")[-1].reply_markup.inline_keyboard
    assert [b.text for row in buttons for b in row] == ["English", "Русский"]
    session = await feed(app, press("lg:ru"))
    assert session.sent("EditMessageText")[-1].text == "Язык: <b>Русский</b>."
    session = await feed(app, message("/tasks"))
    assert "Задач пока нет" in session.new_texts()


@pytest.mark.parametrize("text", ["/detach", "/detach   ", "/claude"])
async def test_empty_goal_gets_a_clear_reply(app, text):
    session = await feed(app, message(text))
    assert "Tell me what to do" in session.new_texts()
    assert await app.store.tasks.list_for(None) == []


async def test_huge_prompt_is_refused_with_the_numbers(app):
    session = await feed(app, message("/detach " + "x" * 5000))
    assert "5000 characters" in session.new_texts() and "1000" in session.new_texts()
    assert await app.store.tasks.list_for(None) == []


async def test_detach_acknowledges_with_label_state_and_cancel_button(app):
    import asyncio

    session = await feed(app, message("/detach Fix the flaky login test"))
    async with asyncio.timeout(10):  # task messages go through the outbox
        while not session.sent():
            await asyncio.sleep(0.02)
    ack = session.sent()[0]
    assert "#1 fix-flaky-login" in ack.text and "queued" in ack.text
    assert ack.reply_markup.inline_keyboard[0][0].callback_data == "t:cancel:1"
    task = await app.store.tasks.get(1)
    assert task.kind is TaskKind.DETACH and task.engine == "claude"


@pytest.mark.parametrize(
    "text", ["/cancel 42", "/cancel", "/cancel abc", "/result 42", "/archive 42", "/archive"]
)
async def test_unknown_ids_get_a_clear_reply(app, text):
    session = await feed(app, message(text))
    reply = session.texts()[-1]
    assert "No task #42" in reply or "Give a task number" in reply


async def _foreign_task(app) -> int:
    task, _ = await app.store.tasks.create(
        NewTask(
            owner_id=OTHER,
            chat_id=OTHER,
            engine="claude",
            kind=TaskKind.DETACH,
            prompt="theirs",
            cwd=app.settings.default_workdir,
        ),
        "theirs",
    )
    await app.store.tasks.set_status(task.id, TaskStatus.INTERRUPTED)
    return task.id


async def test_a_user_cannot_see_or_touch_another_users_task(app):
    task_id = await _foreign_task(app)
    for text in (f"/cancel {task_id}", f"/result {task_id}", f"/archive {task_id}"):
        session = await feed(app, message(text))
        assert f"No task #{task_id}" in session.new_texts()
    session = await feed(app, message("/tasks"))
    assert "No tasks yet" in session.new_texts()
    session = await feed(app, press(f"t:resume:{task_id}"))
    (answer,) = session.sent("AnswerCallbackQuery")[-1:]
    assert f"No task #{task_id}" in answer.text


async def test_reply_to_an_unrelated_message(app):
    session = await feed(app, message("continue please", reply_to=77777))
    assert "does not belong to a task" in session.new_texts()


async def test_unknown_command_and_plain_text(app):
    session = await feed(app, message("/frobnicate"))
    assert "don't know that command" in session.new_texts()
    session = await feed(app, message("hello there"))  # a plain message is a task
    assert "#1 hello-there" in session.new_texts()
    task = await app.store.tasks.get(1)
    assert task.title == "hello there" and task.kind.value == "detach"


@pytest.mark.parametrize("data", ["t:explode:1", "t:cancel:notanumber", "garbage", "t:resume:"])
async def test_forged_or_stale_callback_data_changes_nothing(app, data):
    session = await feed(app, press(data))
    (answer,) = session.sent("AnswerCallbackQuery")
    assert "no longer valid" in answer.text or "No task" in answer.text


async def test_strangers_cause_no_action_and_get_one_refusal(app):
    for _ in range(3):
        session = await feed(app, message("/detach do evil", user=STRANGER))
    await feed(app, press("t:cancel:1", user=STRANGER))
    refusals = [t for t in session.texts() if "private Detach bot" in t]
    assert len(refusals) == 1 and str(STRANGER) in refusals[0]
    assert await app.store.tasks.list_for(None) == []
    assert await app.store.audit.count("access_refused", STRANGER) == 4


async def test_mark_failed_button_on_an_interrupted_task(app):
    task, _ = await app.store.tasks.create(
        NewTask(  # queued, never submitted: no intake here
            owner_id=OWNER,
            chat_id=OWNER,
            engine="claude",
            kind=TaskKind.DETACH,
            prompt="x",
            cwd=app.settings.default_workdir,
        ),
        "x",
    )
    session = await feed(app, press(f"t:fail:{task.id}"))
    answer = session.sent("AnswerCallbackQuery")[-1]
    assert "not interrupted" in answer.text  # only interrupted tasks can be marked failed
    await app.store.tasks.cancel_queued(task.id)
    await app.store.tasks.set_status(task.id, TaskStatus.INTERRUPTED)
    session = await feed(app, press(f"t:fail:{task.id}"))
    assert session.sent("AnswerCallbackQuery")[-1].text == "Marked failed."
    assert "marked failed" in session.new_texts()
    assert (await app.store.tasks.get(task.id)).status is TaskStatus.FAILED
    session = await feed(app, press(f"t:fail:{task.id}"))  # a second tap changes nothing
    assert "not interrupted" in session.sent("AnswerCallbackQuery")[-1].text


@pytest.mark.parametrize(
    ("code", "description", "retry_after"),
    [
        (429, "Too Many Requests: retry after 1", 1),
        (502, "Bad Gateway", None),
    ],
)
async def test_replies_survive_flood_control_and_server_errors(app, code, description, retry_after):
    app.bot.session.fail_next("SendMessage", code, description, retry_after)
    session = await feed(app, message("/help"))
    sends = session.sent()
    assert len(sends) == 2 and sends[0].text == sends[1].text  # the same reply, retried once


async def test_mode_option_sets_the_approval_mode(app):
    from bot.models import ApprovalMode

    await feed(app, message("/claude mode=readonly explain the build"))
    task = await app.store.tasks.get(1)
    assert task.approval_mode is ApprovalMode.READONLY and task.title == "explain the build"
    session = await feed(app, message("/detach mode=sometimes go"))
    assert "Unknown approval mode" in session.new_texts()
    session = await feed(app, message("/detach colour=red go"))
    assert "Unknown option" in session.new_texts() and "mode=" in session.new_texts()
    assert [t.id for t in await app.store.tasks.list_for(None)] == [1]


async def test_grants_listing_and_revoking_only_your_own(app):
    session = await feed(app, message("/grants"))
    assert "No remembered approvals" in session.new_texts()
    mine = await app.store.grants.add(OWNER, "claude", "/w", "Bash(make:*)")
    theirs = await app.store.grants.add(OTHER, "claude", "/w", "Bash(rm:*)")
    session = await feed(app, message("/grants"))
    listing = session.sent()[-1]
    assert "Bash(make:*)" in listing.text and "Bash(rm:*)" not in listing.text
    session = await feed(app, press(f"gr:{theirs.id}"))
    assert "No such remembered approval" in session.sent("AnswerCallbackQuery")[-1].text
    session = await feed(app, press(f"gr:{mine.id}"))
    assert "Revoked" in session.sent("AnswerCallbackQuery")[-1].text
    assert await app.store.grants.active(OWNER) == []
    assert len(await app.store.grants.active(OTHER)) == 1


async def test_working_directories_are_confined(app, tmp_path):
    root = app.settings.default_workdir
    (root / "sub").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    for typed in ("..", "../outside", "escape", str(outside), "/etc", "sub/../../outside"):
        session = await feed(app, message(f"/claude cwd={typed} look around"))
        assert "outside the allowed working directories" in session.new_texts(), typed
    session = await feed(app, message("/claude cwd=nope look"))
    assert "No such directory" in session.new_texts()
    assert await app.store.tasks.list_for(None) == []
    await feed(app, message("/claude cwd=sub look around"))
    assert (await app.store.tasks.get(1)).cwd == str(root / "sub")
    session = await feed(app, message("/cd escape"))
    assert "outside" in session.new_texts()
    session = await feed(app, message("/cd sub"))
    assert str(root / "sub") in session.new_texts()
    await feed(app, message("/claude look again"))
    assert (await app.store.tasks.get(2)).cwd == str(root / "sub")
    session = await feed(app, message("/cd"))
    assert str(root / "sub") in session.new_texts()


async def test_a_stored_task_outside_the_allowed_directories_never_runs(app):
    import asyncio
    from pathlib import Path

    task, _ = await app.store.tasks.create(
        NewTask(  # e.g. written by an older version
            owner_id=OWNER,
            chat_id=OWNER,
            engine="claude",
            kind=TaskKind.DETACH,
            prompt="read it",
            cwd=Path("/etc"),
            announced=False,
        ),
        "read-it",
    )
    await app.intake.poll_once()
    async with asyncio.timeout(20):
        while (turn := await app.store.tasks.last_turn(task.id)).status.active:
            await asyncio.sleep(0.05)
    assert turn.status is TaskStatus.FAILED
    assert "outside the allowed" in Texts().error("en", turn.error)  # localised when shown
