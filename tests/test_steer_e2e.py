"""Steering end to end: the real bot against the fake Bot API, the real claude CLI (and the
local engine) against the scripted model servers. A reply while a turn runs offers Steer now /
Queue; what the acknowledgement says afterwards is what the model's requests show."""

from __future__ import annotations

import asyncio
import json

from bot.models import TaskStatus
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import Call, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked

STEER = "STEER-WORDS also say banana"


def bash(command: str) -> dict:
    return {"text": "working", "tool_use": {"name": "Bash", "input": {"command": command}}}


def buttons(call: Call) -> dict[str, str]:
    markup = call.params.get("reply_markup") or {}
    return {b["text"]: b["callback_data"] for row in markup.get("inline_keyboard", []) for b in row}


async def requests_seen(mock, marker: str, count: int, timeout_s: float = 30) -> list[dict]:
    async with asyncio.timeout(timeout_s):
        while len(found := mock.requests_for(marker)) < count:
            await asyncio.sleep(0.05)
    return found


def carried_as(request: dict, role: str) -> int:
    return sum(STEER in json.dumps(m) for m in request["messages"] if m["role"] == role)


async def reply_while_running(fake: FakeTelegram, app, marker_ack: str) -> Call:
    """The owner replies to the task's acknowledgement; the follow-up's acknowledgement."""
    ack = await fake.wait_text(OWNER, marker_ack)
    await wait_linked(app, OWNER, ack.result["message_id"])
    mark = len(fake.calls)
    await fake.user_message(STEER, OWNER, reply_to_message_id=ack.result["message_id"])
    return await fake.wait_text(OWNER, "into it: Steer now", after=mark)


async def test_steer_now_takes_a_reply_into_a_multi_tool_claude_turn(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-SE-TOOLS",
        [bash("sleep 4; echo one"), bash("echo two"), {"text": "done, banana"}, {"echo": True}],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude mode=auto MARK-SE-TOOLS go", OWNER)
            await requests_seen(anthropic, "MARK-SE-TOOLS", 1)
            followup = await reply_while_running(fake, app, "#1 mark-se-")
            keys = buttons(followup)
            assert {"➡️ Steer now", "Queue"} <= set(keys)
            await fake.press(OWNER, followup.result["message_id"], keys["➡️ Steer now"], OWNER)
            await fake.wait_call("answerCallbackQuery", lambda c: "Sent into" in str(c.params))
            taken = await fake.wait_shown(OWNER, "taken into the running turn at step", 60)
            assert int(taken.params["message_id"]) == followup.result["message_id"]
            card = await fake.wait_text(OWNER, "done, banana", timeout_s=60)
            await fake.press(
                OWNER, card.result["message_id"], buttons(card)["📜 Transcript"], OWNER
            )
            log = (await fake.wait_text(OWNER, "events", timeout_s=10)).params["text"]
            assert f"➡️ {STEER}" in log  # the words the turn took in, where it took them
            requests = anthropic.requests_for("MARK-SE-TOOLS")
            assert len(requests) == 3  # one turn: the steer never ran as a turn of its own
            assert [carried_as(r, "system") for r in requests][0] == 0
            assert carried_as(requests[-1], "system") == 1  # the CLI's note, kept once
            assert not any(carried_as(r, "user") for r in requests)
            assert await app.store.tasks.get_turn(2) is None  # its queued row is gone
            task = await app.store.tasks.get(1)
            assert task.status is TaskStatus.DONE
            await asyncio.sleep(0.5)
            assert len(anthropic.requests_for("MARK-SE-TOOLS")) == 3  # and it stays so


async def test_untapped_it_steers_when_the_setting_says_so(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """DETACH_REPLY_DEFAULT=steer: no tap, and after the choice's wait it goes in."""
    anthropic.script("MARK-SE-AUTO", [bash("sleep 5; echo one"), {"text": "auto done"}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, reply_default="steer", reply_choice_s=1.0
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude mode=auto MARK-SE-AUTO go", OWNER)
            await requests_seen(anthropic, "MARK-SE-AUTO", 1)
            followup = await reply_while_running(fake, app, "#1 mark-se-")
            taken = await fake.wait_shown(OWNER, "taken into the running turn at step 2", 30)
            assert int(taken.params["message_id"]) == followup.result["message_id"]
            assert taken.at - followup.at < 10  # bounded: the 1 s wait, then the tool's end
            await fake.wait_text(OWNER, "auto done", timeout_s=60)
            requests = anthropic.requests_for("MARK-SE-AUTO")
            assert len(requests) == 2 and carried_as(requests[1], "system") == 1


async def test_a_steer_into_a_text_turn_runs_next_once_and_never_in_a_later_turn(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """No tool call ahead: the turn ends with its own answer first; the steer runs as the next
    turn (its own prompt), once; a later follow-up carries it only as history."""
    anthropic.script("MARK-SE-TEXT", [{"text": "first answer", "delay": 4}, {"echo": True}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude MARK-SE-TEXT hi", OWNER)
            await requests_seen(anthropic, "MARK-SE-TEXT", 1)
            followup = await reply_while_running(fake, app, "#1 mark-se-")
            await fake.press(
                OWNER, followup.result["message_id"], buttons(followup)["➡️ Steer now"], OWNER
            )
            await fake.wait_shown(OWNER, "the turn ended first: it runs as the next turn", 30)
            first = await fake.wait_text(OWNER, "first answer", timeout_s=60)
            second = await fake.wait_text(OWNER, "ECHO", timeout_s=60)
            assert STEER in second.params["text"] and second.at > first.at
            requests = anthropic.requests_for("MARK-SE-TEXT")
            assert len(requests) == 2 and carried_as(requests[0], "user") == 0
            turn = await app.store.tasks.get_turn(2)
            assert turn is not None and turn.prompt == STEER and turn.status is TaskStatus.DONE
            mark = len(fake.calls)
            await fake.user_message(
                "UNRELATED later", OWNER, reply_to_message_id=second.result["message_id"]
            )
            later = await fake.wait_text(OWNER, "ECHO", timeout_s=60, after=mark)
            assert "UNRELATED later" in later.params["text"] and STEER not in later.params["text"]
            (_, _, third) = anthropic.requests_for("MARK-SE-TEXT")
            assert carried_as(third, "user") == 1  # the earlier turn's, as history: once


async def test_queue_keeps_it_behind_the_running_turn(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-SE-Q", [bash("sleep 3; echo one"), {"text": "q one"}, {"echo": True}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude mode=auto MARK-SE-Q go", OWNER)
            await requests_seen(anthropic, "MARK-SE-Q", 1)
            followup = await reply_while_running(fake, app, "#1 mark-se-")
            queue = buttons(followup)["Queue"]
            await fake.press(OWNER, followup.result["message_id"], queue, OWNER)
            queued = await fake.wait_shown(OWNER, "follow-up queued (after the running turn)")
            assert len(buttons(queued)) == 1 and "➡️ Steer now" not in buttons(queued)
            await fake.wait_text(OWNER, "q one", timeout_s=60)
            echo = await fake.wait_text(OWNER, "ECHO", timeout_s=60)
            assert STEER in echo.params["text"]
            requests = anthropic.requests_for("MARK-SE-Q")
            assert not any(carried_as(r, "system") for r in requests)


async def test_local_takes_a_steer_before_its_next_model_call(
    tmp_path, claude_bin, agent_env, workdir
):
    (workdir / "app.py").write_text("print('hi')\n")
    chat = ChatMock().start()
    try:
        chat.script(
            "MARK-SE-LOCAL",
            [
                {"tools": [{"name": "read_file", "args": {"path": "app.py"}}], "delay": 4},
                {"text": "local done"},
            ],
        )
        async with FakeTelegram() as fake:
            settings = make_settings(
                tmp_path / "data",
                fake,
                claude_bin,
                workdir,
                local_base_url=chat.base_url,
                local_model="mock-model",
            )
            async with running_bot(settings, agent_env) as app:
                await fake.user_message("/local MARK-SE-LOCAL look", OWNER)
                await requests_seen(chat, "MARK-SE-LOCAL", 1)
                followup = await reply_while_running(fake, app, "#1 mark-se-")
                await fake.press(
                    OWNER, followup.result["message_id"], buttons(followup)["➡️ Steer now"], OWNER
                )
                await fake.wait_shown(OWNER, "taken into the running turn at step 2", 30)
                await fake.wait_text(OWNER, "local done", timeout_s=60)
                first, second = chat.requests_for("MARK-SE-LOCAL")
                assert carried_as(first, "user") == 0
                assert second["messages"][-1] == {"role": "user", "content": STEER}
                assert await app.store.tasks.get_turn(2) is None
    finally:
        chat.stop()


async def test_codex_steer_goes_in_through_turn_steer(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, openai, workdir
):
    openai.script(
        "MARK-SE-CX",
        [{"shell": "sleep 8; echo one"}, {"shell": "echo two"}, {"text": "codex steered"}],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin)
        async with running_bot(settings, {**agent_env, **codex_env}) as app:
            await fake.user_message("/codex mode=auto MARK-SE-CX go", OWNER)
            await requests_seen(openai, "MARK-SE-CX", 1, timeout_s=60)
            followup = await reply_while_running(fake, app, "#1 mark-se-")
            steer = buttons(followup)["➡️ Steer now"]
            await fake.press(OWNER, followup.result["message_id"], steer, OWNER)
            await fake.wait_shown(OWNER, "taken into the running turn at step 2", 30)
            await fake.wait_text(OWNER, "codex steered", timeout_s=60)
            requests = openai.requests_for("MARK-SE-CX")
            assert len(requests) == 3 and STEER not in json.dumps(requests[0])
            assert STEER in json.dumps(requests[1])  # within the running turn
            assert await app.store.tasks.get_turn(2) is None
