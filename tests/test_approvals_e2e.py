"""Approvals end to end: the real claude CLI asks through the stdio permission prompt, the bot
turns it into buttons at the fake Bot API server, and a tap decides."""

from __future__ import annotations

import asyncio

from bot.approvals.view import ApprovalAction
from bot.models import TaskStatus
from tests.support.fake_telegram import Call, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked

OTHER, STRANGER = 222, 999


def touch(name: str) -> dict:
    return {
        "tool_use": {
            "name": "Bash",
            "input": {"command": f"touch {name}", "description": f"create {name}"},
        }
    }


def buttons(call: Call) -> dict[str, str]:
    return {
        b["text"]: b["callback_data"]
        for row in call.params["reply_markup"]["inline_keyboard"]
        for b in row
    }


async def answer_of(fake: FakeTelegram, query_id: str) -> str:
    call = await fake.wait_call(
        "answerCallbackQuery", lambda c: c.params["callback_query_id"] == query_id
    )
    return call.params.get("text", "")


async def edited(
    fake: FakeTelegram, message_id: int, needle: str, after: int = 0, timeout_s: float = 30
) -> Call:
    return await fake.wait_call(
        "editMessageText",
        lambda c: int(c.params["message_id"]) == message_id and needle in c.params["text"],
        timeout_s,
        after,
    )


def settings_for(tmp_path, fake, claude_bin, workdir, **extra):
    return make_settings(
        tmp_path / "data",
        fake,
        claude_bin,
        workdir,
        allowed_users=frozenset({OWNER, OTHER}),
        **extra,
    )


async def test_allow_deny_and_refused_taps(tmp_path, claude_bin, agent_env, anthropic, workdir):
    anthropic.script("MARK-AD", [touch("yes.txt"), touch("no.txt"), {"text": "finished"}])
    async with FakeTelegram() as fake:
        async with running_bot(settings_for(tmp_path, fake, claude_bin, workdir), agent_env):
            await fake.user_message("/claude MARK-AD make files", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
            assert "touch yes.txt" in ask.params["text"] and "#1 mark-ad-make" in ask.params["text"]
            keys = buttons(ask)
            assert set(keys) == {"✅ Allow", "⛔ Deny", "♾ Always…"}
            msg_id = ask.result["message_id"]
            # refused: somebody else's tap, a stranger's tap, forged data
            q = await fake.press(OWNER, msg_id, keys["✅ Allow"], OTHER)
            assert "not your task" in await answer_of(fake, q)
            await fake.press(OWNER, msg_id, keys["✅ Allow"], STRANGER)
            q = await fake.press(
                OWNER, msg_id, ApprovalAction(qid=9999, choice="allow").pack(), OWNER
            )
            assert "no longer valid" in await answer_of(fake, q)
            q = await fake.press(OWNER, msg_id, "ap:1:explode", OWNER)
            assert "no longer valid" in await answer_of(fake, q)
            assert not (workdir / "yes.txt").exists()

            q = await fake.press(OWNER, msg_id, keys["✅ Allow"], OWNER)
            assert await answer_of(fake, q) == "Allowed."
            allowed = await edited(fake, msg_id, "Allowed")
            assert "reply_markup" not in allowed.params  # buttons removed
            q = await fake.press(OWNER, msg_id, keys["⛔ Deny"], OWNER)  # a second tap
            assert await answer_of(fake, q) == "Answered already."

            ask2 = await fake.wait_text(OWNER, "touch no.txt", timeout_s=60)
            q = await fake.press(OWNER, ask2.result["message_id"], buttons(ask2)["⛔ Deny"], OWNER)
            assert await answer_of(fake, q) == "Denied."
            done = await fake.wait_text(OWNER, "done", timeout_s=60)
            assert "finished" in done.params["text"]
            denials = await fake.wait_text(OWNER, "Denied tool calls")
            assert "touch no.txt" in denials.params["text"]
    assert (workdir / "yes.txt").exists() and not (workdir / "no.txt").exists()
    last = anthropic.requests_for("MARK-AD")[-1]
    assert "denied this tool call from Telegram" in str(last["messages"])


async def test_always_remembers_until_revoked(tmp_path, claude_bin, agent_env, anthropic, workdir):
    anthropic.script(
        "MARK-ALWAYS",
        [
            touch("a.txt"),
            {"text": "one"},
            touch("a.txt"),
            {"text": "two"},
            touch("a.txt"),
            {"text": "three"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude MARK-ALWAYS go", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
            msg_id = ask.result["message_id"]
            q = await fake.press(OWNER, msg_id, buttons(ask)["♾ Always…"], OWNER)
            assert "Check the rule" in await answer_of(fake, q)
            confirm = await edited(fake, msg_id, "Bash(touch a.txt)")
            assert await app.store.grants.active(OWNER) == []  # nothing stored before confirm
            q = await fake.press(OWNER, msg_id, buttons(confirm)["✅ Always allow this"], OWNER)
            assert await answer_of(fake, q) == "Remembered."
            first = await fake.wait_text(OWNER, "one", timeout_s=60)
            (grant,) = await app.store.grants.active(OWNER)
            assert grant.pattern == "Bash(touch a.txt)" and grant.cwd == str(workdir)

            await wait_linked(app, OWNER, first.result["message_id"])
            mark = len(fake.calls)
            await fake.user_message("again", OWNER, reply_to_message_id=first.result["message_id"])
            await fake.wait_text(OWNER, "two", timeout_s=60, after=mark)
            assert not [
                c
                for c in fake.calls[mark:]
                if c.method == "sendMessage" and "wants to use" in c.params["text"]
            ]  # not asked again

            await fake.user_message("/grants", OWNER)
            listing = await fake.wait_text(OWNER, "Remembered approvals", after=mark)
            q = await fake.press(
                OWNER, listing.result["message_id"], buttons(listing)["Revoke 1"], OWNER
            )
            assert "Revoked" in await answer_of(fake, q)
            assert await app.store.grants.active(OWNER) == []
            second = [
                c for c in fake.calls if c.method == "sendMessage" and "two" in c.params["text"]
            ][-1]
            mark = len(fake.calls)
            await fake.user_message(
                "once more", OWNER, reply_to_message_id=second.result["message_id"]
            )
            ask3 = await fake.wait_text(OWNER, "wants to use", timeout_s=60, after=mark)
            await fake.press(OWNER, ask3.result["message_id"], buttons(ask3)["✅ Allow"], OWNER)
            await fake.wait_text(OWNER, "three", timeout_s=60, after=mark)
            assert await app.store.audit.count("grant_added", OWNER) == 1
            assert await app.store.audit.count("grant_revoked", OWNER) == 1


async def test_timeout_denies_and_a_late_tap_is_expired(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-LATE", [touch("late.txt"), {"text": "went on"}])
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, approval_timeout_s=2)
        async with running_bot(settings, agent_env):
            await fake.user_message("/detach mode=ask MARK-LATE go", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
            await edited(fake, ask.result["message_id"], "Expired")
            await fake.wait_text(OWNER, "went on", timeout_s=60)
            q = await fake.press(OWNER, ask.result["message_id"], buttons(ask)["✅ Allow"], OWNER)
            assert await answer_of(fake, q) == "This request has expired."
    assert not (workdir / "late.txt").exists()
    assert "Nobody answered this permission request" in str(
        anthropic.requests_for("MARK-LATE")[-1]["messages"]
    )


async def test_questions_as_buttons_and_two_tasks_waiting_at_once(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-Q1",
        [
            {
                "tool_use": {
                    "name": "AskUserQuestion",
                    "input": {
                        "questions": [
                            {
                                "question": "Which color?",
                                "header": "Color",
                                "multiSelect": False,
                                "options": [
                                    {"label": "Red", "description": ""},
                                    {"label": "Blue", "description": ""},
                                ],
                            },
                            {
                                "question": "Which sizes?",
                                "header": "Size",
                                "multiSelect": True,
                                "options": [
                                    {"label": "S", "description": ""},
                                    {"label": "M", "description": ""},
                                    {"label": "L", "description": ""},
                                ],
                            },
                        ]
                    },
                }
            },
            {"echo": True},
        ],
    )
    anthropic.script("MARK-Q2", [touch("two.txt"), {"text": "second task done"}])
    async with FakeTelegram() as fake:
        async with running_bot(settings_for(tmp_path, fake, claude_bin, workdir), agent_env) as app:
            await fake.user_message("/claude MARK-Q1 ask me", OWNER)
            await fake.user_message("/claude MARK-Q2 write", OWNER)
            color = await fake.wait_text(OWNER, "Which color?", timeout_s=60)
            ask2 = await fake.wait_text(OWNER, "touch two.txt", timeout_s=60)
            # both wait; the bot still answers commands meanwhile
            mark = len(fake.calls)
            await fake.user_message("/tasks", OWNER)
            listing = await fake.wait_text(OWNER, "Your tasks", after=mark)
            listed = listing.params["text"]  # each named by what it waits for
            assert "waiting for your answer" in listed and "waiting for your approval" in listed
            # answer the second task first: each is answered independently
            await fake.press(OWNER, ask2.result["message_id"], buttons(ask2)["✅ Allow"], OWNER)
            await fake.wait_text(OWNER, "second task done", timeout_s=60)
            (asking,) = [t for t in await app.store.tasks.list_for(OWNER) if "MARK-Q1" in t.title]
            assert asking.status is TaskStatus.RUNNING  # still waiting for its answer
            await fake.press(OWNER, color.result["message_id"], buttons(color)["Blue"], OWNER)
            sizes = await fake.wait_text(OWNER, "Which sizes?", timeout_s=30)
            size_id = sizes.result["message_id"]
            for label in ("S", "L"):
                await fake.press(OWNER, size_id, buttons(sizes)[label], OWNER)
                await edited(fake, size_id, "Which sizes?")
            await fake.wait_call(
                "editMessageText",
                lambda c: (
                    int(c.params["message_id"]) == size_id
                    and "☑️ L" in str(c.params.get("reply_markup"))
                ),
            )
            await fake.press(OWNER, size_id, buttons(sizes)["Done"], OWNER)
            done = await fake.wait_text(OWNER, "ECHO", timeout_s=60)
            assert '"Which color?"="Blue"' in done.params["text"]
            assert '"Which sizes?"="S, L"' in done.params["text"]
    assert (workdir / "two.txt").exists()


async def test_waiting_task_can_be_cancelled(tmp_path, claude_bin, agent_env, anthropic, workdir):
    anthropic.script("MARK-WAITC", [touch("never.txt"), {"text": "never"}])
    async with FakeTelegram() as fake:
        async with running_bot(settings_for(tmp_path, fake, claude_bin, workdir), agent_env) as app:
            await fake.user_message("/claude MARK-WAITC go", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
            mark = len(fake.calls)
            await fake.user_message("/cancel 1", OWNER)
            # one answer to /cancel: "cancelling…", which the turn's card then replaces
            answer = await fake.wait_text(OWNER, "#1 mark-waitc-go", timeout_s=30, after=mark)
            async with asyncio.timeout(30):
                while (
                    "· cancelled"
                    not in fake.find_message(OWNER, answer.result["message_id"])["text"]
                ):
                    await asyncio.sleep(0.05)
            await edited(fake, ask.result["message_id"], "turn ended")
            await asyncio.sleep(0)
            assert (await app.store.tasks.get(1)).status is TaskStatus.CANCELLED
    assert not (workdir / "never.txt").exists()
