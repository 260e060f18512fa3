"""One card per outcome, at most two buzzes a task, no stale word: through the real bot over
HTTP against the fake Bot API, which records each message's ``disable_notification``. A
denied-only task's card says so (real Claude); a long answer, a budget stop and a cancel buzz
once; follow-ups by reply, by button and during a turn, and a usage-limit notice, end true."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

from bot.events import LimitReached, SessionStarted, TurnFinished, Usage
from bot.models import TaskStatus, TurnSpec
from bot.telegram.render import MAX_CHUNKS, markdown_chunks
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked
from tests.test_phone import (
    SESSION,
    answer,
    buttons_data,
    buttons_of,
    buzzing,
    sends,
    settings,
    until,
    waits_for_approval,
)

# a state a task leaves ("2 queued turns dropped" is history, not a state)
STALE = re.compile(r"\bqueued\b(?! turn)|\brunning\b|waits for|waiting for|cancelling|by itself")


def stale_words(fake: FakeTelegram, task_id: int) -> list[str]:
    """What the chat still shows that is no longer true of an ended task: a word of a state it
    left, or a live Cancel of it."""
    found = []
    for message in fake.bot_messages(OWNER):
        text = message.get("text") or ""
        found += [f"{word!r} in {text!r}" for word in STALE.findall(text)]
        if f"t:cancel:{task_id}" in json.dumps(message.get("reply_markup") or {}):
            found.append(f"Cancel on {text!r}")
    return found


def long_answer(chars: int) -> str:
    paragraph = "The quick brown fox checks every module and writes a line about it. " * 10
    return "\n\n".join([paragraph] * (chars // len(paragraph) + 1))[:chars]


def spent_budget() -> tuple:
    """A turn Claude stopped at its ``--max-budget-usd``."""
    return (
        SessionStarted(SESSION, "fake-model"),
        TurnFinished(
            is_error=True,
            result_text="",
            session_id=SESSION,
            cost_usd=0.02,
            usage=Usage(input_tokens=10, output_tokens=5),
            subtype="error_max_budget_usd",
        ),
    )


def limited() -> tuple:
    """A turn its engine's usage limit stopped (resets in two hours)."""
    return (
        SessionStarted(SESSION, "fake-model"),
        LimitReached(datetime.now(UTC) + timedelta(hours=2)),
        TurnFinished(True, "limit reached", SESSION, None, Usage()),
    )


async def test_a_denied_only_task_ends_in_one_card_that_says_so(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    touch = {"name": "Bash", "input": {"command": "touch nope.txt", "description": "create"}}
    anthropic.script("MARK-DENIED", [{"tool_use": touch}, {"text": "Skipped the file."}])
    async with FakeTelegram() as fake:
        # a loaded machine may take past the progress message's delay: not what this counts
        real = make_settings(tmp_path / "data", fake, claude_bin, workdir, progress_delay_s=120)
        async with running_bot(real, agent_env) as app:
            await fake.wait_call("setMyCommands")
            mark = len(fake.calls)
            await fake.user_message("/detach mode=readonly MARK-DENIED create", OWNER)
            card = await fake.wait_text(OWNER, "Skipped the file.", timeout_s=60)
            text = card.params["text"]
            assert "⚠️ <b>#1 mark-denied-create</b> · done, 1 tool call denied" in text
            assert "✅" not in text and "touch nope.txt" in text  # the denial, listed
            assert "t:followup:1" in json.dumps(card.params["reply_markup"])  # its buttons
            assert await app.outbox.idle(10)
            task_sends = [c for c in sends(fake, mark) if "#1" in c.params.get("text", "")]
            assert len(task_sends) == 2, [c.params["text"] for c in task_sends]  # ack and card
            assert buzzing(fake, mark) == [card]
    assert not (workdir / "nope.txt").exists()


async def test_a_long_answer_buzzes_once(tmp_path, workdir):
    def script(spec: TurnSpec) -> tuple:
        chars = 12_600 if "parts" in spec.prompt else 40_000
        return answer(long_answer(chars))

    expected = len(markdown_chunks(long_answer(12_600)))
    assert 2 <= expected <= MAX_CHUNKS < len(markdown_chunks(long_answer(40_000)))

    async with FakeTelegram() as fake:
        engine = FakeEngine(script)
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            mark = len(fake.calls)
            await fake.user_message("/claude answer in parts", OWNER)
            await until(lambda: len(sends(fake, mark)) > expected, timeout_s=20)  # ack + parts
            assert await app.outbox.idle(10)
            parts = sends(fake, mark)[1:]
            assert len(parts) == expected
            assert "t:followup:1" in str(parts[-1].params["reply_markup"])  # the card's buttons
            assert buzzing(fake, mark) == [parts[0]]  # the first part; the rest are silent

            mark = len(fake.calls)
            await fake.user_message("/claude answer as a file", OWNER)
            await until(lambda: len(sends(fake, mark)) == 4, timeout_s=20)  # ack, card, 2 files
            assert await app.outbox.idle(10)
            preview, document, page = sends(fake, mark)[1:]
            assert document.method == page.method == "sendDocument"  # Markdown, HTML
            assert "attached as files" in preview.params["text"]
            assert "t:followup:2" in str(preview.params["reply_markup"])  # buttons on it
            assert buzzing(fake, mark) == [preview]  # the file is silent


async def test_a_budget_stop_is_one_message_with_extend_and_stop(tmp_path, workdir):
    def script(spec: TurnSpec) -> tuple:
        return answer("Continued to the end.") if "extended" in spec.prompt else spent_budget()

    async with FakeTelegram() as fake:
        engine = FakeEngine(script)
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            mark = len(fake.calls)
            await fake.user_message("/claude max_usd=0.01 spend it", OWNER)
            card = await fake.wait_text(OWNER, "budget reached", timeout_s=20)
            assert "stopped at its budget: spent $0.02" in card.params["text"]
            assert "of $0.01" in card.params["text"]
            rows = card.params["reply_markup"]["inline_keyboard"]
            assert [b["callback_data"][:3] for b in rows[0]] == ["bu:", "bu:"]  # Extend, Stop
            assert "t:followup:1" in json.dumps(rows[1:])  # the card's own buttons below
            assert await app.outbox.idle(10)
            assert buzzing(fake, mark) == [card]  # one message, one buzz

            card_id = card.result["message_id"]
            await fake.press(OWNER, card_id, rows[0][0]["callback_data"], OWNER)
            await fake.wait_text(OWNER, "Continued to the end.", timeout_s=20)
            await until(
                lambda: "Budget raised to $0.03" in fake.find_message(OWNER, card_id)["text"]
            )
            assert not any(d.startswith("bu:") for d in buttons_data(fake, card_id))
            assert "budget reached" in fake.find_message(OWNER, card_id)["text"]  # history kept
            assert await app.outbox.idle(10)
            assert len(buzzing(fake, mark)) == 2  # the stop, and the end after Extend

            await fake.user_message("/claude max_usd=0.01 spend again", OWNER)
            card = await fake.wait_text(OWNER, "#2 spend-again</b> · budget reached")
            stop = card.params["reply_markup"]["inline_keyboard"][0][1]["callback_data"]
            stopped = card.result["message_id"]
            await fake.press(OWNER, stopped, stop, OWNER)
            await until(
                lambda: "Stopped here at $0.02" in fake.find_message(OWNER, stopped)["text"]
            )
            assert (await app.store.tasks.get(2)).status is TaskStatus.BUDGET_EXCEEDED


async def test_a_cancel_is_one_message_edited_to_its_end(tmp_path, workdir):
    async with FakeTelegram() as fake:
        engine = FakeEngine(waits_for_approval())
        custom = settings(tmp_path, fake, workdir, max_concurrent_turns=1)
        async with running_bot(custom, {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            mark = len(fake.calls)
            await fake.user_message("/claude stop me later", OWNER)
            await fake.wait_text(OWNER, "wants to use", timeout_s=20)
            await fake.user_message("/claude never starts", OWNER)  # queued behind the first
            await fake.wait_text(OWNER, "#2 never-starts")
            await fake.user_message("/cancel 2", OWNER)  # it never started: over at once
            await fake.wait_text(OWNER, "#2 never-starts</b> · cancelled", after=mark)
            await fake.user_message("/cancel 1", OWNER)
            await until(lambda: all(not stale_words(fake, n) for n in (1, 2)), timeout_s=20)
            assert await app.outbox.idle(10)
            answers = [c for c in sends(fake, mark) if "· cancel" in c.params["text"]]
            assert len(answers) == 2  # one message per /cancel
            assert "queued turn" in answers[0].params["text"]
            first = fake.find_message(OWNER, answers[1].result["message_id"])
            assert "⏹ #1 stop-me-later · cancelled" in first["text"]  # edited into the card
            assert "t:followup:1" in json.dumps(first["reply_markup"])
            loud = [c for c in buzzing(fake, mark) if "wants to use" not in c.params["text"]]
            assert len([c for c in loud if "#1 " in c.params["text"]]) == 1
            assert len(engine.specs) == 1  # the second task never started
            assert (await app.store.tasks.get(1)).status is TaskStatus.CANCELLED


async def test_follow_ups_by_reply_by_button_and_during_a_turn_end_true(tmp_path, workdir):
    def script(spec: TurnSpec) -> tuple:
        return waits_for_approval() if "wait" in spec.prompt else answer(f"Did: {spec.prompt}.")

    async with FakeTelegram() as fake:
        engine = FakeEngine(script)
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude wait for me", OWNER)
            ack = await fake.wait_text(OWNER, "#1 wait-me")
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=20)
            await wait_linked(app, OWNER, ack.result["message_id"])
            # during a turn: queued behind it, with Cancel
            mark = len(fake.calls)
            await fake.user_message(
                "then tidy", OWNER, reply_to_message_id=ack.result["message_id"]
            )
            during = await fake.wait_text(OWNER, "after the running turn", after=mark)
            assert "Cancel" in json.dumps(during.params["reply_markup"])
            allow = next(d for d in buttons_data(fake, ask.result["message_id"]) if "allow" in d)
            await fake.press(OWNER, ask.result["message_id"], allow, OWNER)
            card = await fake.wait_text(OWNER, "Did: then tidy.", timeout_s=20)
            # by reply to the card
            await wait_linked(app, OWNER, card.result["message_id"])
            await fake.user_message(
                "and sweep", OWNER, reply_to_message_id=card.result["message_id"]
            )
            card = await fake.wait_text(OWNER, "Did: and sweep.", timeout_s=20)
            # by the card's Follow up button, then a reply to its prompt
            await fake.press(OWNER, card.result["message_id"], "t:followup:1", OWNER)
            prompt = await fake.wait_text(OWNER, "reply to this message with your follow-up")
            await wait_linked(app, OWNER, prompt.result["message_id"])
            await fake.user_message(
                "last bit", OWNER, reply_to_message_id=prompt.result["message_id"]
            )
            await fake.wait_text(OWNER, "Did: last bit.", timeout_s=20)
            await until(lambda: not stale_words(fake, 1), timeout_s=20)
            notes = [m for m in fake.bot_messages(OWNER) if "follow-up ·" in (m.get("text") or "")]
            assert len(notes) == 3 and all("✅ done" in m["text"] for m in notes), notes
            assert all(buttons_of(fake, m["message_id"]) == [] for m in notes)
            assert (await app.store.tasks.get(1)).status is TaskStatus.DONE


async def test_a_limit_notice_says_how_the_task_ended(tmp_path, workdir):
    async with FakeTelegram() as fake:
        engine = FakeEngine(limited())
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude hit the wall", OWNER)
            notice = await fake.wait_text(OWNER, "waits for Claude's usage limit", timeout_s=20)
            notice_id = notice.result["message_id"]
            await fake.press(OWNER, notice_id, "t:cancel:1", OWNER)
            await until(lambda: "cancelled" in fake.find_message(OWNER, notice_id)["text"])
            assert (
                "waited for Claude's usage limit · ⏹ cancelled"
                in (fake.find_message(OWNER, notice_id)["text"])
            )
            assert buttons_of(fake, notice_id) == []
            await until(lambda: not stale_words(fake, 1), timeout_s=10)
            assert (await app.store.tasks.get(1)).status is TaskStatus.CANCELLED
