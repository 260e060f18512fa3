"""What waits on the owner, end to end through the real bot and the fake Bot API: /pending
answers an approval through the same desk (the original message is edited too), /tasks puts a
waiting task first with its reason, and the progress line says a turn waits on an approval.

Usage windows: the real claude 2.1.197, logged in with a plan's token, against the scripted
model server answering with ``anthropic-ratelimit-unified-7d-surpassed-threshold``,
``-7d-utilization`` and ``-7d-reset`` headers, prints one ``rate_limit_event`` with status
``allowed_warning`` per process (measured: with an API key, none) — two tasks, one warning."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from bot.events import (
    ApprovalRequest,
    LimitReached,
    SessionStarted,
    TurnFinished,
    Usage,
    WindowReported,
)
from bot.models import TaskStatus
from executors.claude_protocol import parse_event
from executors.codex import CodexExecutor
from tests.support.fake_engine import FakeEngine, Pause
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.postgres import STORE_KINDS, opened_store
from tests.test_approvals_e2e import answer_of, buttons, edited, touch
from tests.test_codex_executor import collect
from tests.test_codex_executor import spec as codex_spec
from tests.test_limits import subscription
from tests.test_phone import SESSION, answer, settings, until
from tests.test_store import Clock


def warned_window(reset: int, used: str = "0.85") -> dict[str, str]:
    """The headers of a plan's weekly window past the API's warning threshold."""
    return {
        "anthropic-ratelimit-unified-status": "allowed_warning",
        "anthropic-ratelimit-unified-reset": str(reset),
        "anthropic-ratelimit-unified-representative-claim": "seven_day",
        "anthropic-ratelimit-unified-7d-surpassed-threshold": "0.75",
        "anthropic-ratelimit-unified-7d-utilization": used,
        "anthropic-ratelimit-unified-7d-reset": str(reset),
    }


def test_an_allowed_warning_is_a_window_and_not_a_stop():
    line = {
        "type": "rate_limit_event",
        "rate_limit_info": {
            "status": "allowed_warning",
            "resetsAt": 1796455329,
            "rateLimitType": "seven_day",
            "utilization": 0.85,
            "isUsingOverage": False,
            "surpassedThreshold": 0.75,
        },
    }
    assert parse_event(line) == [
        WindowReported("seven_day", 0.85, datetime.fromtimestamp(1796455329, UTC))
    ]
    odd = {**line, "rate_limit_info": {"status": "allowed_warning", "utilization": "lots"}}
    assert parse_event(odd) == []  # no window named: nothing to keep
    allowed = {**line, "rate_limit_info": {"status": "allowed", "rateLimitType": "five_hour"}}
    assert parse_event(allowed) == []


async def test_codex_reports_its_windows_from_the_response_headers(
    codex_bin, codex_env, openai, workdir
):
    """Measured with codex 0.171.0 (API key login): the ``x-codex-primary-*`` and
    ``-secondary-*`` headers of a model response become an ``account/rateLimits/updated``
    notification (its JSON schema: ``usedPercent``, ``windowDurationMins``, ``resetsAt``),
    sent after every response, past a threshold or not."""
    reset = int(time.time()) + 3600
    headers = {
        "x-codex-primary-used-percent": "83",
        "x-codex-primary-window-minutes": "300",
        "x-codex-primary-reset-at": str(reset),
        "x-codex-secondary-used-percent": "41",
        "x-codex-secondary-window-minutes": "10080",
        "x-codex-secondary-reset-at": str(reset + 86400),
    }
    openai.script("MARK-CWIN", [{"text": "hi", "headers": headers}])
    events = await collect(CodexExecutor(codex_bin, codex_env), codex_spec("MARK-CWIN hi", workdir))
    assert [e for e in events if isinstance(e, WindowReported)] == [
        WindowReported("five_hour", 0.83, datetime.fromtimestamp(reset, UTC)),
        WindowReported("seven_day", 0.41, datetime.fromtimestamp(reset + 86400, UTC)),
    ]


async def test_pending_answers_an_approval_and_the_original_is_edited(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-PEND", [touch("made.txt"), {"text": "finished"}])
    data = tmp_path / "data"
    async with FakeTelegram() as fake:
        async with running_bot(make_settings(data, fake, claude_bin, workdir), agent_env):
            await fake.user_message("/pending", OWNER)
            await fake.wait_text(OWNER, "Nothing asks for your answer")
            await fake.user_message("/claude MARK-PEND make a file", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
            mark = len(fake.calls)
            await fake.user_message("/pending", OWNER)
            copy = await fake.wait_text(OWNER, "touch made.txt", after=mark)
            assert copy.result["message_id"] != ask.result["message_id"]
            assert buttons(copy) == buttons(ask)  # the same buttons: the same desk answers
            q = await fake.press(OWNER, copy.result["message_id"], buttons(copy)["✅ Allow"], OWNER)
            assert await answer_of(fake, q) == "Allowed."
            original = await edited(fake, ask.result["message_id"], "Allowed")
            assert "reply_markup" not in original.params  # the original's buttons are gone
            await edited(fake, copy.result["message_id"], "Allowed")
            q = await fake.press(OWNER, ask.result["message_id"], buttons(ask)["⛔ Deny"], OWNER)
            assert await answer_of(fake, q) == "Answered already."  # the first answer won
            await fake.wait_text(OWNER, "finished", timeout_s=60)
    assert (workdir / "made.txt").exists()


async def test_tasks_puts_the_waiting_first_and_progress_says_it_waits(tmp_path, workdir):
    asks = ApprovalRequest("Bash", {"command": "rm -rf build"}, "t1", "Bash(rm -rf build)")

    def script(spec):  # type: ignore[no-untyped-def]
        if spec.task_id == 1:
            return (SessionStarted(SESSION, "fake-model"), asks, *answer("after it")[1:])
        return (SessionStarted(SESSION, "fake-model"), Pause(30), *answer("late")[1:])

    engine = FakeEngine(script)
    fast = {"progress_delay_s": 0.3, "progress_interval_s": 0.3, "stall_s": 0.3}
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir, **fast), {}, {"claude": engine}
        ) as app:
            await fake.user_message("/detach tidy the build", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=20)
            await fake.wait_text(OWNER, "waits for your answer above", timeout_s=20)  # progress
            await fake.user_message("/detach count the lines", OWNER)
            await until(lambda: app.store is not None and len(engine.specs) == 2)
            mark = len(fake.calls)
            await fake.user_message("/tasks", OWNER)
            listed = (await fake.wait_text(OWNER, "Your tasks", after=mark)).params["text"]
            first, second = listed.index("#1 tidy-build"), listed.index("#2 count-lines")
            assert first < second  # #2 is newer and running, but #1 waits on the owner
            assert "⏸ <b>#1 tidy-build</b> · waiting for your approval" in listed
            await asyncio.sleep(1.0)  # past the stall threshold thrice over
            said = [c for c in fake.calls if "no word" in str(c.params.get("text", ""))]
            said += [c for c in fake.calls if "said nothing" in str(c.params.get("text", ""))]
            labels = [c.params["text"] for c in said]
            assert labels and all("#2" in t for t in labels)  # never for the task that asks
            allow = buttons(ask)["✅ Allow"]
            await fake.press(OWNER, ask.result["message_id"], allow, OWNER)
            await fake.wait_text(OWNER, "after it", timeout_s=20)
            await fake.user_message("/cancel 2", OWNER)
            await until(lambda: engine.decisions == [True])
            async with asyncio.timeout(20):
                while (await app.store.tasks.get(2)).status is not TaskStatus.CANCELLED:
                    await asyncio.sleep(0.05)


async def test_a_usage_warning_arrives_once_across_two_tasks(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    reset = int(time.time()) + 3 * 3600
    anthropic.script("MARK-WIN", [{"text": "first done", "headers": warned_window(reset)}])
    anthropic.script("MARK-AGAIN", [{"text": "second done", "headers": warned_window(reset)}])
    data = tmp_path / "data"
    async with FakeTelegram() as fake:
        async with running_bot(
            make_settings(data, fake, claude_bin, workdir, limit_warn_percent=80),
            subscription(agent_env),
        ):
            await fake.user_message("/tz Europe/Berlin", OWNER)
            await fake.user_message("/claude MARK-WIN go", OWNER)
            warning = await fake.wait_text(OWNER, "85 % of your weekly window", timeout_s=60)
            text = warning.params["text"]
            assert "Claude" in text and "(Europe/Berlin)" in text
            assert str(warning.params.get("disable_notification")).lower() == "true"  # told
            await fake.wait_text(OWNER, "first done", timeout_s=60)
            await fake.user_message("/claude MARK-AGAIN go", OWNER)
            await fake.wait_text(OWNER, "second done", timeout_s=60)
            mark = len(fake.calls)
            await fake.user_message("/limits", OWNER)
            limits = (await fake.wait_text(OWNER, "Usage windows", after=mark)).params["text"]
            assert "weekly: 85 % used" in limits and "(Europe/Berlin)" in limits
            warnings = [m for m in fake.bot_messages(OWNER) if "window is used" in m["text"]]
            assert len(warnings) == 1


async def test_limits_names_the_limit_in_force_and_the_tasks_it_holds(tmp_path, workdir):
    reset = datetime.now(UTC) + timedelta(hours=2)
    limited = TurnFinished(
        is_error=True,
        result_text="You've hit your session limit",
        session_id=SESSION,
        cost_usd=None,
        usage=Usage(),
    )
    window = WindowReported("five_hour", 1.0, reset)
    stopped = LimitReached(reset, "five_hour")
    engine = FakeEngine((SessionStarted(SESSION, "m"), window, stopped, limited))
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.user_message("/detach fix the login", OWNER)
            async with asyncio.timeout(20):
                while getattr(await app.store.tasks.get(1), "status", None) is not (
                    TaskStatus.WAITING_FOR_LIMIT
                ):
                    await asyncio.sleep(0.05)
            mark = len(fake.calls)
            await fake.user_message("/limits", OWNER)
            shown = (await fake.wait_text(OWNER, "Usage windows", after=mark)).params["text"]
            assert "five-hour: 100 % used" in shown and "limit reached" in shown
            assert "tasks held by it: #1 fix-login" in shown
            mark = len(fake.calls)
            await fake.user_message("/tasks", OWNER)
            listed = (await fake.wait_text(OWNER, "Your tasks", after=mark)).params["text"]
            assert "waiting for the usage limit · 0s ago · resets" in listed


@pytest.fixture(params=STORE_KINDS)
async def store(request, tmp_path):  # type: ignore[no-untyped-def]
    async with opened_store(request.param, tmp_path, Clock()) as opened:
        yield opened


async def test_a_window_is_warned_once_until_it_resets(store):
    """The store's clock starts at 2026-11-29 12:00 UTC."""
    week = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
    assert not await store.windows.report("claude", "seven_day", 0.5, week, 0.8)  # below
    assert await store.windows.report("claude", "seven_day", 0.85, week, 0.8)
    assert not await store.windows.report("claude", "seven_day", 0.9, week, 0.8)  # same window
    jitter = week + timedelta(seconds=30)  # the API's rounding of one reset
    assert not await store.windows.report("claude", "seven_day", 0.9, jitter, 0.8)
    assert await store.windows.report("codex", "seven_day", 0.85, week, 0.8)  # another engine
    assert await store.windows.report("claude", "five_hour", 0.95, None, 0.8)
    assert not await store.windows.report("claude", "five_hour", 0.97, None, 0.8)
    following = week + timedelta(days=7)
    assert await store.windows.report("claude", "seven_day", 0.81, following, 0.8)  # a new one
    shown = {(w.engine, w.window): (w.used, w.resets_at) for w in await store.windows.all()}
    assert shown == {
        ("claude", "five_hour"): (0.97, None),
        ("claude", "seven_day"): (0.81, following),
        ("codex", "seven_day"): (0.85, week),
    }
    past = datetime(2026, 11, 29, 11, 0, tzinfo=UTC)  # a window already reset: not shown
    assert not await store.windows.report("codex", "five_hour", 0.99, past, 0.8)
    assert ("codex", "five_hour") not in {(w.engine, w.window) for w in await store.windows.all()}


async def test_a_pending_copy_follows_the_original_when_it_is_settled(tmp_path, workdir):
    """/pending's copy of an approval is edited with the original: answered on the original
    (the copy loses its buttons and says the outcome), and expired by the timeout."""
    asks = ApprovalRequest("Bash", {"command": "make deploy"}, "t1", "Bash(make deploy)")
    engine = FakeEngine((SessionStarted(SESSION, "fake-model"), asks, *answer("went on")[1:]))
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir, approval_timeout_s=3), {}, {"claude": engine}
        ):
            for task, choice, outcome in ((1, "✅ Allow", "Allowed"), (2, None, "Expired")):
                mark = len(fake.calls)
                await fake.user_message(f"/detach deploy number {task}", OWNER)
                ask = await fake.wait_text(OWNER, "wants to use", timeout_s=20, after=mark)
                mark = len(fake.calls)
                await fake.user_message("/pending", OWNER)
                copy = await fake.wait_text(OWNER, "make deploy", after=mark)
                assert buttons(copy) == buttons(ask)
                if choice is not None:  # answered on the original, not on the copy
                    await fake.press(OWNER, ask.result["message_id"], buttons(ask)[choice], OWNER)
                await edited(fake, ask.result["message_id"], outcome, after=mark)
                again = await edited(fake, copy.result["message_id"], outcome, after=mark)
                assert "reply_markup" not in again.params  # no live button on a settled copy
                await fake.wait_text(OWNER, "went on", timeout_s=20, after=mark)
    assert engine.decisions == [True, False]
