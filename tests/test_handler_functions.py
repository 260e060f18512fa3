"""Unit tier: handler functions imported and called directly (aiogram types built by hand, what
the middlewares would add passed by name), and the routers' loan to one dispatcher at a time."""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pytest
from aiogram import Dispatcher
from aiogram.filters import CommandObject
from aiogram.types import ErrorEvent, Message, Update

from bot.errors import TaskNotFound, UserInputError
from bot.models import NotifyPolicy
from bot.settings import Settings
from bot.telegram.reply import Reply
from bot.telegram.texts import Texts
from handlers import ROUTERS, Services, build_dispatcher, release_routers
from handlers.basics import on_help, on_notify, on_start
from handlers.errors import on_error
from handlers.replies import on_other, on_unknown_command
from handlers.schedules import on_schedule, on_tz
from handlers.tasks import TaskCommand, on_tasks
from tests.support.fake_telegram import TOKEN
from tests.support.harness import app_in_own_task
from tests.support.recording_session import RecordingSession

OWNER = 111
TEXTS = Texts()
_ids = itertools.count(1)


class SaidOutbox:
    """The outbox as a handler sees it (``send``), keeping what was said instead of queueing."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, str]] = []

    async def send(self, chat_id: int, text: str, **_: Any) -> int:
        self.sent.append((chat_id, text))
        return len(self.sent)


def message(text: str, user: int = OWNER) -> Message:
    raw: dict[str, Any] = {
        "message_id": next(_ids),
        "date": int(time.time()),
        "text": text,
        "chat": {"id": user, "type": "private"},
        "from": {"id": user, "is_bot": False, "first_name": "U", "language_code": "en"},
    }
    if text.startswith("/"):
        raw["entities"] = [{"type": "bot_command", "offset": 0, "length": len(text.split()[0])}]
    return Message.model_validate(raw)


def command(text: str) -> CommandObject:
    name, _, args = text.removeprefix("/").partition(" ")
    return CommandObject(prefix="/", command=name, args=args or None)


def said_reply(locale: str = "en") -> tuple[Reply, SaidOutbox]:
    outbox = SaidOutbox()
    return Reply(outbox, TEXTS, locale, OWNER), outbox  # type: ignore[arg-type]


async def test_start_help_and_the_catch_alls_answer_in_the_users_language():
    reply, outbox = said_reply()
    await on_start(message("/start"), reply)
    await on_help(message("/help"), reply)
    await on_unknown_command(message("/frobnicate"), reply)
    await on_other(message("hello"), reply)
    texts = [text for _, text in outbox.sent]
    assert [chat for chat, _ in outbox.sent] == [OWNER] * 4
    assert "<b>Detach</b>" in texts[0] and "/detach" in texts[1]
    assert texts[2:] == [
        TEXTS.get("en", "error.unknown_command"),
        TEXTS.get("en", "error.plain_text"),
    ]
    reply, outbox = said_reply("ru")
    await on_unknown_command(message("/frobnicate"), reply)
    assert outbox.sent == [(OWNER, TEXTS.get("ru", "error.unknown_command"))]
    assert outbox.sent[0][1] != texts[2]


def error_event(exc: Exception) -> ErrorEvent:
    update = Update(update_id=next(_ids), message=message("/cancel 42"))
    return ErrorEvent(update=update, exception=exc)


async def test_the_error_handler_says_what_was_wrong_or_that_it_was_ours(caplog):
    outbox = SaidOutbox()
    refused = TaskNotFound("#42")
    await on_error(error_event(refused), TEXTS, outbox, "ru")  # type: ignore[arg-type]
    await on_error(error_event(ValueError("boom")), TEXTS, outbox)  # type: ignore[arg-type]
    assert outbox.sent == [
        (OWNER, TEXTS.get("ru", "error.task_not_found", ref="#42")),
        (OWNER, TEXTS.get("en", "error.internal")),
    ]
    assert "#42" in outbox.sent[0][1]
    assert "boom" in caplog.text  # the internal one is logged, the person's is not
    assert "task_not_found" not in caplog.text


@pytest.fixture
async def app(tmp_path, claude_bin, agent_env, workdir):
    async with app_in_own_task(
        settings(tmp_path, claude_bin, workdir), session=RecordingSession(), environ=agent_env
    ) as app:
        yield app


def settings(data: Path, claude_bin: str, workdir: Path) -> Settings:
    return Settings(
        _env_file=None,
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER}),
        data_dir=data / "data",
        claude_bin=claude_bin,
        workdir=workdir,
        outbox_chat_interval_s=0,
    )  # type: ignore[call-arg]


async def test_notify_reads_and_sets_the_chats_policy_through_the_real_service(app):
    reply, outbox = said_reply()
    await on_notify(message("/notify quiet"), command("/notify quiet"), app.uses.chat, reply)
    assert await app.uses.chat.notify_policy(OWNER) is NotifyPolicy.QUIET
    await on_notify(message("/notify"), command("/notify"), app.uses.chat, reply)
    quiet = TEXTS.get("en", "notify.current", policy="quiet")
    assert [text for _, text in outbox.sent] == [quiet, quiet]
    with pytest.raises(UserInputError) as bad:  # the errors router answers it
        await on_notify(message("/notify loud"), command("/notify loud"), app.uses.chat, reply)
    assert bad.value.key == "error.bad_notify"


async def test_tasks_schedules_and_tz_with_nothing_there_yet(app):
    reply, outbox = said_reply()
    await on_tasks(message("/tasks"), app.uses.lookup, app.dispatcher["waiting"], OWNER, reply)
    await on_schedule(message("/every"), command("/every"), app.schedules, OWNER, reply)
    await on_tz(message("/tz"), command("/tz"), app.schedules, OWNER, reply)
    assert [text for _, text in outbox.sent] == [
        TEXTS.get("en", "tasks.empty"),
        TEXTS.get("en", "schedule.usage_every"),
        TEXTS.get("en", "schedule.tz_current", tz=app.settings.timezone),
    ]


async def test_the_task_command_filter_takes_detach_and_the_engines_it_was_given(app):
    engines = ("claude", "codex")
    taken = await TaskCommand()(message("/codex fix it"), app.bot, engines)
    assert taken == {"command": command("/codex fix it")}
    assert await TaskCommand()(message("/detach"), app.bot, engines)
    assert not await TaskCommand()(message("/codex fix it"), app.bot, ("claude",))
    assert not await TaskCommand()(message("/tasks"), app.bot, engines)


def services_of(dp: Dispatcher) -> Services:
    """The services a dispatcher hands its handlers (its workflow data)."""
    return Services(**{name: dp[name] for name in Services.__dataclass_fields__})


async def test_one_app_at_a_time_borrows_the_routers_and_gives_them_back(
    tmp_path, claude_bin, agent_env, workdir
):
    """Apps built one after another in one process each serve the handlers; a second
    dispatcher while one is alive is refused with a clear error, not aiogram's."""
    for run in ("first", "second"):
        async with app_in_own_task(
            settings(tmp_path / run, claude_bin, workdir),
            session=RecordingSession(),
            environ=agent_env,
        ) as app:
            assert all(r.parent_router is app.dispatcher for r in ROUTERS)
            with pytest.raises(RuntimeError, match="one at a time"):
                build_dispatcher(services_of(app.dispatcher), engines=(), engines_ready=app.settle)
            update = Update(update_id=next(_ids), message=message("/start"))
            await app.dispatcher.feed_update(app.bot, update)
            assert await app.outbox.idle(10)
            assert "<b>Detach</b>" in app.bot.session.texts()[-1]
        assert all(r.parent_router is None for r in ROUTERS), f"the {run} app kept them"


def test_aiogram_still_lets_go_of_a_released_router():
    """``release_routers`` writes aiogram's private ``Router._parent_router`` (3.31.0); on a
    version where that no longer detaches a router, this fails (as the bot's teardown would)."""
    first, second = Dispatcher(), Dispatcher()
    try:
        first.include_routers(*ROUTERS)
        release_routers(first)
        assert first.sub_routers == []
        assert all(r.parent_router is None for r in ROUTERS)
        second.include_routers(*ROUTERS)  # aiogram refuses a router that has a parent
        assert second.sub_routers == list(ROUTERS)
        release_routers(first)  # not first's: left alone
        assert all(r.parent_router is second for r in ROUTERS)
    finally:
        for dp in (first, second):
            release_routers(dp)
    assert all(r.parent_router is None for r in ROUTERS)
