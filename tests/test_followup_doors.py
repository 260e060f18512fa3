"""One follow-up from every door, end to end: the real bot against the fake Bot API, its board
over HTTP, a voice draft in a task's topic and an MCP client, with an engine that replays a
turn and takes in what is steered into it. Whichever door it came through, a follow-up while a
turn runs goes into that turn (Steer now) or after it (Queue), its words are in the transcript,
and its acknowledgement in Telegram says where it came from and where it is, until it settles."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from mcp import Client

from bot.app import App
from bot.events import SessionStarted, TextEmitted, TurnFinished, Usage
from bot.mcp.desk import McpDesk, McpPlace
from bot.mcp.server import build_server
from bot.models import TaskStatus
from bot.turns.transcript import human_line
from tests.support.fake_engine import FakeEngine, Until
from tests.support.fake_forum import FakeForum
from tests.support.fake_telegram import Call, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.postgres import STORE_KINDS, opened_store
from tests.support.stt_server import Answer, SttServer
from tests.test_mcp import client_tasks
from tests.test_phone import buttons_data, buttons_of, until
from tests.test_store import new

SESSION = "0f0e0d0c-0b0a-4908-8706-050403020100"
LINK = re.compile(r"(http://[^\s<\"]+/signin\?t=[\w.=-]+)")


def works_until(gate: asyncio.Event) -> tuple:
    """A turn at work until ``gate`` (a later turn, with the gate open, ends at once)."""
    return (
        SessionStarted(SESSION, "fake-model"),
        TextEmitted("working on it"),
        Until(gate, 30),
        TurnFinished(False, "turn over", SESSION, 0.01, Usage(1, 1)),
    )


async def running(app: App, task_id: int = 1) -> None:
    async with asyncio.timeout(10):
        while (task := await app.store.tasks.get(task_id)) is None or (
            task.status is not TaskStatus.RUNNING
        ):
            await asyncio.sleep(0.02)


async def finished(app: App, task_id: int = 1) -> None:
    async with asyncio.timeout(15):
        while (await app.store.tasks.get(task_id)).status.active:
            await asyncio.sleep(0.02)


async def said(app: App, task_id: int = 1) -> list[str]:
    """The transcript's lines of the owner's words, as /transcript and MCP read them."""
    lines = await app.store.transcript.after(task_id, 0, 500)
    return [
        h
        for x in lines
        if x.kind in ("SteerTaken", "Prompted") and (h := human_line(x.kind, x.body))
    ]


async def settled(fake: FakeTelegram, ack: Call, needle: str) -> str:
    """The follow-up's acknowledgement once it says ``needle`` and has no button left."""
    message_id = ack.result["message_id"]
    await until(
        lambda: (
            needle in fake.find_message(OWNER, message_id)["text"]
            and not buttons_of(fake, message_id)
        )
    )
    return str(fake.find_message(OWNER, message_id)["text"])


@asynccontextmanager
async def board_client(
    fake: FakeTelegram, app: App
) -> AsyncIterator[tuple[aiohttp.ClientSession, str, str]]:
    """Signed in on the board through its /board link: the session, its CSRF token, the URL."""
    mark = len(fake.calls)
    await fake.user_message("/board", OWNER)
    sent = await fake.wait_text(OWNER, "/signin?t=", after=mark)
    link = LINK.search(json.dumps(sent.params))
    assert link is not None, sent.params
    board = app.dispatcher["board"]
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(
        cookie_jar=jar, timeout=aiohttp.ClientTimeout(total=20)
    ) as http:
        async with http.get(link.group(1), allow_redirects=False) as response:
            assert response.status == 303
        async with http.get(f"{board.url}/api/me") as response:
            csrf = (await response.json())["csrf"]
        yield http, csrf, board.url


async def post(http: aiohttp.ClientSession, url: str, csrf: str, body: dict) -> dict:
    async with http.post(url, json=body, headers={"X-CSRF-Token": csrf}) as response:
        assert response.status == 200, await response.text()
        return await response.json()


async def test_the_boards_steer_now_goes_into_the_running_turn_like_a_reply(tmp_path, workdir):
    gate = asyncio.Event()
    engine = FakeEngine(works_until(gate))
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir, board_port=0)
        async with running_bot(settings, {}, {"claude": engine}) as app:
            await fake.user_message("/claude mode=auto build it", OWNER)
            await running(app)
            async with board_client(fake, app) as (http, csrf, url):
                async with http.get(f"{url}/api/tasks/1") as response:
                    assert (await response.json())["task"]["running"] is True  # two buttons
                mark = len(fake.calls)
                done = await post(
                    http,
                    f"{url}/api/tasks/1/followup",
                    csrf,
                    {"prompt": "BOARD-WORDS", "steer": True},
                )
                assert done["steer"] == "sent" and done["behind"] is True
                ack = await fake.wait_text(OWNER, "follow-up from the board", after=mark)
                assert "after the running turn" in ack.params["text"]
                await until(lambda: engine.steered == ["BOARD-WORDS"])
                gate.set()
                await finished(app)
                text = await settled(fake, ack, "taken into the running turn at step")
                assert "follow-up from the board" in text
                async with http.get(f"{url}/api/tasks/1/transcript") as response:
                    items = (await response.json())["items"]
            assert {"kind": "said", "text": "BOARD-WORDS", "steered": True}.items() <= next(
                i for i in items if i["kind"] == "said"
            ).items()
            assert await said(app) == ["➡️ BOARD-WORDS"]
            assert len(engine.specs) == 1 and await app.store.tasks.get_turn(2) is None


async def test_a_board_follow_up_says_the_truth_whether_a_turn_runs_or_not(tmp_path, workdir):
    """Queue while a turn runs: after it, said so; with none running, its turn starts at once
    and its acknowledgement never says it waits behind one. Each ends saying how it went."""
    gate = asyncio.Event()
    engine = FakeEngine(works_until(gate))
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir, board_port=0)
        async with running_bot(settings, {}, {"claude": engine}) as app:
            await fake.user_message("/claude mode=auto build it", OWNER)
            await running(app)
            async with board_client(fake, app) as (http, csrf, url):
                mark = len(fake.calls)
                queued = await post(
                    http,
                    f"{url}/api/tasks/1/followup",
                    csrf,
                    {"prompt": "QUEUED-WORDS", "steer": False},
                )
                assert queued["steer"] == "queued" and queued["behind"] is True
                behind = await fake.wait_text(OWNER, "follow-up from the board", after=mark)
                assert "Steer now" not in str(behind.params.get("reply_markup"))
                gate.set()
                await until(lambda: len(engine.specs) == 2)
                await finished(app)
                assert engine.steered == [] and engine.specs[1].prompt == "QUEUED-WORDS"
                text = await settled(fake, behind, "✅ done")
                assert text.startswith("↪️ #1 build-it · follow-up from the board · ")
                mark = len(fake.calls)
                idle = await post(
                    http, f"{url}/api/tasks/1/followup", csrf, {"prompt": "IDLE-WORDS"}
                )
                assert idle["behind"] is False and idle["steer"] is None
                assert idle["text"] == "Sent: its turn starts now."
                ack = await fake.wait_text(OWNER, "follow-up from the board", after=mark)
                assert "after the running turn" not in ack.params["text"]
                await until(lambda: len(engine.specs) == 3)
                await finished(app)
                text = await settled(fake, ack, "✅ done")
                assert "follow-up from the board" in text
            assert await said(app) == ["↪️ QUEUED-WORDS", "↪️ IDLE-WORDS"]


async def test_a_voice_draft_started_while_a_turn_runs_offers_steer_now(tmp_path, workdir):
    gate = asyncio.Event()
    engine = FakeEngine(works_until(gate))
    async with SttServer() as stt, FakeForum(private_topics=True) as fake:
        stt.answers.append(Answer(text="VOICE-WORDS also the docs"))
        settings = make_settings(
            tmp_path / "data", fake, "claude", workdir,
            stt_base_url=stt.base_url, stt_api_key="sk-test-voice",
        )  # fmt: skip
        async with running_bot(settings, {}, {"claude": engine}) as app:
            await fake.user_message("/claude mode=auto first job", OWNER)
            thread = int((await fake.wait_call("createForumTopic")).result["message_thread_id"])
            await running(app)
            await fake.wait_call(  # the task's topic is known once its first message is in it
                "sendMessage", lambda c: int(c.params.get("message_thread_id") or 0) == thread
            )
            mark = len(fake.calls)
            await fake.user_voice(b"OggS-in-topic", OWNER, duration_s=2, thread_id=thread)
            draft = await fake.wait_text(OWNER, "🎤 VOICE-WORDS", after=mark)
            await fake.press(
                OWNER,
                draft.result["message_id"],
                buttons_data(fake, draft.result["message_id"])[0],
                OWNER,
            )
            ack = await fake.wait_text(OWNER, "into it: Steer now", after=mark)
            steer = {
                b["text"]: b["callback_data"]
                for row in ack.params["reply_markup"]["inline_keyboard"]
                for b in row
            }
            assert {"➡️ Steer now", "Queue"} <= set(steer)
            await fake.press(OWNER, ack.result["message_id"], steer["➡️ Steer now"], OWNER)
            await until(lambda: engine.steered == ["VOICE-WORDS also the docs"])
            gate.set()
            await finished(app)
            await settled(fake, ack, "taken into the running turn at step")
            assert await said(app) == ["➡️ VOICE-WORDS also the docs"]
            assert len(engine.specs) == 1


async def test_an_mcp_follow_up_steered_in_is_carried_out_by_the_bot(tmp_path, workdir):
    """`detach mcp` runs no turn: its steer=true is a flag the bot's intake carries out; left
    unset, DETACH_REPLY_DEFAULT decides (queue here)."""
    gate = asyncio.Event()
    engine = FakeEngine(works_until(gate))
    data_dir = tmp_path / "data"
    async with FakeTelegram() as fake:
        settings = make_settings(data_dir, fake, "claude", workdir)
        async with running_bot(settings, {}, {"claude": engine}) as app:
            await fake.user_message("/claude mode=auto build it", OWNER)
            await running(app)
            place = McpPlace(data_dir, OWNER, OWNER, ("claude",), 1000, data_dir / "bot.alive")
            async with Client(
                build_server(McpDesk(client_tasks(app.store, place), place))
            ) as client:
                mark = len(fake.calls)
                steered = await client.call_tool(
                    "followup", {"task_id": 1, "prompt": "MCP-WORDS", "steer": True}
                )
                found = json.loads(steered.content[0].text)
                assert found["steer"] == "asked" and found["behind_running_turn"] is True
                ack = await fake.wait_text(OWNER, "(MCP)", after=mark)
                await until(lambda: engine.steered == ["MCP-WORDS"])
                queued = await client.call_tool("followup", {"task_id": 1, "prompt": "MCP-LATER"})
                assert json.loads(queued.content[0].text)["steer"] == "queued"
            gate.set()
            await until(lambda: len(engine.specs) == 2)
            await finished(app)
            text = await settled(fake, ack, "taken into the running turn at step")
            assert text.startswith("➡️ #1 build-it · follow-up from mcp ")
            assert "(MCP) · taken" in text
            assert engine.specs[1].prompt == "MCP-LATER"
            assert await said(app) == ["➡️ MCP-WORDS", "↪️ MCP-LATER"]


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_steer_asked_from_outside_is_handed_out_once(kind, tmp_path):
    """The flag `detach mcp` sets on a queued follow-up, on SQLite and PostgreSQL: handed to
    the bot once; a turn no longer queued is never asked for nor handed out."""
    async with opened_store(kind, tmp_path) as store:
        task, first = await store.tasks.create(new(), "a")
        follow = await store.tasks.add_turn(task.id, "more")
        assert await store.claims.take_steers() == []
        assert await store.claims.request_steer(follow.id)
        assert not await store.claims.request_steer(first.id + 999)
        assert await store.claims.take_steers() == [follow.id]
        assert await store.claims.take_steers() == []  # once
        assert await store.claims.request_steer(follow.id)
        await store.tasks.cancel_queued(task.id)  # it went on meanwhile
        assert await store.claims.take_steers() == []
        assert not await store.claims.request_steer(follow.id)
