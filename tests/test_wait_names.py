"""Every state a task can wait in has one name on every surface, end to end (the real bot, the
fake Bot API, an engine that replays a stream, the board over HTTP): a task waiting for an
approval, an answer, consent to its repository's check, a budget decision, its engine's usage
limit, at the terminal, or held by its preflight is named the same on its acknowledgement, in
/tasks, in /pending (where a tap answers it) and on the board, and the name is the state's."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.events import (
    LimitReached,
    SessionStarted,
    TurnFinished,
    Usage,
    WindowReported,
)
from bot.models import NewTask, QuestionKind, TaskKind, TaskStatus, WaitState
from bot.store.preflights import encode_held
from bot.telegram.render import plain
from tests.support.chat_mock import ChatMock
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import Call, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.postgres import STORE_KINDS, opened_store
from tests.test_buzzes import spent_budget
from tests.test_check_consent import MACHINE, cloned
from tests.test_checks import finished
from tests.test_pending_copies import asks_colours
from tests.test_phone import SESSION, waits_for_approval
from tests.test_preflight_doors import Bench, board_client, preflight_settings, shown
from tests.test_preflight_local import PREFLIGHT

Reach = Callable[[FakeTelegram, Any], Awaitable[None]]


def limited() -> tuple:
    reset = datetime.now(UTC) + timedelta(hours=2)
    stopped = TurnFinished(True, "You've hit your session limit", SESSION, None, Usage())
    window = WindowReported("five_hour", 1.0, reset)
    return (SessionStarted(SESSION, "m"), window, LimitReached(reset, "five_hour"), stopped)


async def to_terminal(fake: FakeTelegram, app: Any) -> None:
    card = await fake.wait_text(OWNER, "the answer", timeout_s=20)
    tap = next(
        b["callback_data"]
        for row in card.params["reply_markup"]["inline_keyboard"]
        for b in row
        if b["text"] == "🖥 To terminal"
    )
    await fake.press(OWNER, card.result["message_id"], tap, OWNER)
    await fake.wait_text(OWNER, "is at the terminal since", timeout_s=20)


def shows(text: str) -> Reach:
    async def reach(fake: FakeTelegram, app: Any) -> None:
        await fake.wait_text(OWNER, text, timeout_s=20)

    return reach


async def parked(fake: FakeTelegram, app: Any) -> None:
    await fake.wait_text(OWNER, "usage limit", timeout_s=20)
    assert (await app.store.tasks.get(1)).status is TaskStatus.WAITING_FOR_LIMIT


@dataclass(frozen=True)
class Case:
    name: str  # the state's one name, as the owner reads it everywhere
    script: tuple
    command: str
    reach: Reach
    pending: bool = True  # /pending lists it (something waits for a tap)
    settings: dict[str, Any] = field(default_factory=dict)


CASES = {
    "approval": Case(
        "waiting for your approval", waits_for_approval(), "/claude tidy", shows("wants to use")
    ),
    "question": Case(
        "waiting for your answer", asks_colours(), "/claude paint", shows("Which colours?")
    ),
    "consent": Case(
        "waiting for your consent to its check",
        finished("agent done"),
        "/claude mode=auto tidy",
        shows("asks, in its"),
        settings={"approval_timeout_s": 60},
    ),
    "budget": Case(
        "waiting for your budget decision",
        spent_budget(),
        "/claude max_usd=0.01 spend it",
        shows("budget reached"),
    ),
    "usage_limit": Case(
        "waiting for the usage limit", limited(), "/claude fix", parked, pending=False
    ),
    "terminal": Case(
        "held at the terminal", finished("the answer"), "/claude ask", to_terminal, pending=False
    ),
    "preflight": Case(
        "held by its preflight", (), "/detach MARK-WIPE wipe it", shows("Not started")
    ),
}


async def now_says(fake: FakeTelegram, call: Call, name: str) -> str:
    """The first line of a message once the bot's edits made it say ``name``."""
    async with asyncio.timeout(20):
        while name not in (
            line := str(fake.find_message(OWNER, call.result["message_id"])["text"])
        ):
            await asyncio.sleep(0.05)
    return line.split("\n")[0]


@pytest.mark.parametrize("state", list(CASES))
async def test_a_waiting_state_has_one_name_on_every_surface(state, tmp_path, workdir):
    case, held = CASES[state], state == "preflight"
    chat = ChatMock().start()
    chat.script(PREFLIGHT, [{"text": json.dumps({"verdict": "refuse", "reason": "No."})}])
    more = {**case.settings, **(preflight_settings(tmp_path, chat) if held else {})}
    if state == "consent":
        cloned(workdir, "true")  # a repository's own check: it asks before it runs
    try:
        async with FakeTelegram() as fake:
            settings = make_settings(
                tmp_path / "data", fake, "claude", workdir, board_port=0, **more
            )
            async with running_bot(settings, MACHINE, {"claude": FakeEngine(case.script)}) as app:
                await fake.wait_call("setMyCommands")
                await fake.user_message(case.command, OWNER)
                ack = await fake.wait_text(OWNER, "⏸" if held else "#1 ", timeout_s=20)
                await case.reach(fake, app)
                # the acknowledgement (a held task's: its hold's message)
                said = f"⏸ {case.name}" if held else f"⏸ #1 {ack_label(ack)} · {case.name}"
                assert await now_says(fake, ack, case.name) == said
                listed = (await shown(fake, "/tasks", "Your tasks")).params["text"]
                assert any(x.startswith("⏸") and case.name in x for x in listed.split("\n"))
                if case.pending:
                    copy = await shown(fake, "/pending", case.name)
                    assert plain(copy.params["text"].split("\n")[0]) == said
                bench = Bench(fake, app, tmp_path, workdir, [])
                async with board_client(bench) as (http, _csrf, url):
                    async with http.get(f"{url}/api/tasks") as response:
                        [row] = (await response.json())["tasks"]
                assert (row["wait"], row["wait_text"]) == (state, case.name), row
    finally:
        chat.stop()


def ack_label(ack: Call) -> str:
    """The slug of the task an acknowledgement is about."""
    return str(ack.params["text"]).split("<b>#1 ", 1)[1].split("</b>", 1)[0]


@pytest.fixture(params=STORE_KINDS)
async def store(request, tmp_path):  # type: ignore[no-untyped-def]
    async with opened_store(request.param, tmp_path) as opened:
        yield opened


async def test_the_store_reads_what_a_list_of_tasks_waits_for_and_a_hold_moves_the_pulse(
    store, tmp_path
):
    """SQLite and PostgreSQL alike: one read for a list (the oldest question of a task says,
    a check's approval is consent, the terminal first), and the board's pulse moves when a
    task is held by its preflight and when the hold settles."""
    new = NewTask(OWNER, OWNER, "claude", TaskKind.DETACH, "fix it", tmp_path)
    made = [(await store.tasks.create(new, f"t{n}"))[0] for n in range(4)]
    check = {"check": "make test", "text": "may it run?"}
    await store.questions.create(made[0].id, None, QuestionKind.APPROVAL, check, None)
    await store.questions.create(made[0].id, None, QuestionKind.QUESTION, {}, None)
    await store.questions.create(made[1].id, None, QuestionKind.APPROVAL, {"text": "?"}, None)
    await store.terminal.hold(made[2].id, OWNER)
    await store.questions.create(made[2].id, None, QuestionKind.QUESTION, {}, None)
    assert await store.waits.of(made) == {
        made[0].id: WaitState.CONSENT,
        made[1].id: WaitState.APPROVAL,
        made[2].id: WaitState.TERMINAL,
    }
    before = await store.pulse.mark()
    hold = await store.preflights.create(
        owner_id=OWNER, chat_id=OWNER, locale="en", reply_to=None, text="fix it",
        with_options=False, decision="refuse", reason="no", task=encode_held(new, None),
    )  # fmt: skip
    held = await store.pulse.mark()
    assert held != before
    assert (await store.preflights.get(hold.id)).task == new  # as its door planned it
    await store.preflights.resolve(hold.id, "cancelled", "")
    assert await store.pulse.mark() != held
