"""Usage limits, as the pinned CLIs report them, and tasks that wait for them.

The recorded streams in tests/fixtures/limits/ were taken from the real CLIs against a server
answering every model request with the limit response:
- claude 2.1.197 logged in with a subscription token (CLAUDE_CODE_OAUTH_TOKEN): a 429
  ``rate_limit_error`` with ``anthropic-ratelimit-unified-status: rejected``,
  ``-reset: <epoch>``, ``-representative-claim: five_hour`` (with an API key the same response is
  a plain "API Error: Request rejected (429)" and no rate_limit_event);
- codex 0.171.0 app-server: a 429 ``{"error": {"type": "usage_limit_reached", "resets_at": …,
  "resets_in_seconds": …}}``, which it reports as an ``error`` notification with
  ``codexErrorInfo: "usageLimitExceeded"`` and "… try again at 4:00 PM." in local time.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from bot.models import ApprovalMode, LimitReached, TaskStatus, TurnFinished, TurnSpec
from bot.turns.outcome import local_time
from executors.claude import ClaudeExecutor
from executors.claude_protocol import parse_event
from executors.codex import CodexExecutor
from executors.codex_protocol import TurnState, notification_events, try_again_at
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

FIXTURES = Path(__file__).parent / "fixtures" / "limits"


def unified_limit(reset: int) -> dict:
    return {
        "error": {
            "status": 429,
            "type": "rate_limit_error",
            "message": "This request would exceed your account's rate limit.",
            "headers": {
                "anthropic-ratelimit-unified-status": "rejected",
                "anthropic-ratelimit-unified-reset": str(reset),
                "anthropic-ratelimit-unified-representative-claim": "five_hour",
                "anthropic-ratelimit-unified-5h-status": "rejected",
                "anthropic-ratelimit-unified-5h-reset": str(reset),
            },
        }
    }


def subscription(agent_env: dict[str, str]) -> dict[str, str]:
    """The CLI logged in with a plan's token instead of an API key (limits are a plan's)."""
    env = {k: v for k, v in agent_env.items() if k != "ANTHROPIC_API_KEY"}
    return {**env, "CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-test-token"}


def spec(prompt: str, cwd: Path) -> TurnSpec:
    return TurnSpec(1, 1, prompt, cwd, approval_mode=ApprovalMode.ASK)


class NoApprovals:
    async def decide(self, request):  # type: ignore[no-untyped-def]
        raise AssertionError(f"unexpected approval request {request}")


def test_the_recorded_claude_stream_gives_the_reset_time():
    events = [
        e
        for line in (FIXTURES / "claude-2.1.197-session-limit.jsonl").read_text().splitlines()
        for e in parse_event(json.loads(line))
    ]
    limit, no_time = [e for e in events if isinstance(e, LimitReached)]
    assert no_time.resets_at is None  # the result's 429; the event before it has the time
    final = events[-1]
    assert isinstance(final, TurnFinished) and final.is_error
    assert "You've hit your session limit · resets" in final.result_text
    assert limit.resets_at is not None and limit.resets_at.tzinfo is not None
    assert limit.message == "five_hour"
    # the CLI's own words name the same minute
    shown = limit.resets_at.strftime("%-I:%M%p").lower()
    assert shown in final.result_text


def test_the_recorded_codex_stream_gives_the_reset_time():
    state = TurnState()
    events = []
    for line in (FIXTURES / "codex-0.171.0-usage-limit.jsonl").read_text().splitlines():
        data = json.loads(line)
        if "method" in data:
            events += notification_events(data["method"], data.get("params") or {}, state)
    (limit,) = [e for e in events if isinstance(e, LimitReached)]
    assert limit.resets_at is not None
    final = events[-1]
    assert isinstance(final, TurnFinished) and final.is_error
    assert "try again at" in final.result_text


def test_codex_times_are_read_in_its_zone_and_roll_to_the_next_day():
    berlin = datetime(2026, 12, 1, 15, 30, tzinfo=ZoneInfo("Europe/Berlin"))
    assert try_again_at("… or try again at 4:05 PM.", berlin) == berlin.replace(
        hour=16, minute=5, second=0
    )
    assert try_again_at("try again at 3:10 PM", berlin) == berlin.replace(
        hour=15, minute=10
    ) + timedelta(days=1)
    assert try_again_at("try again at 09:00", berlin) == berlin.replace(
        hour=9, minute=0
    ) + timedelta(days=1)
    assert try_again_at("Upgrade to Pro.", berlin) is None


def test_a_reset_time_is_said_in_the_users_zone():
    moment = datetime(2026, 12, 1, 15, 59, tzinfo=UTC)
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    assert local_time(moment, "Europe/Berlin", now) == "16:59 (Europe/Berlin)"
    assert local_time(moment, "Asia/Tokyo", now) == "2026-12-02 00:59 (Asia/Tokyo)"
    assert local_time(moment, "Not/AZone", now) == "15:59 (UTC)"


async def test_claude_reports_its_plan_limit_with_the_reset(
    claude_bin, agent_env, anthropic, workdir
):
    reset = int(time.time()) + 2 * 3600
    anthropic.script("MARK-LIMIT", [unified_limit(reset)])
    executor = ClaudeExecutor(claude_bin, subscription(agent_env))
    async with asyncio.timeout(60):
        events = [e async for e in executor.run(spec("MARK-LIMIT go", workdir), NoApprovals())]
    limit = next(e for e in events if isinstance(e, LimitReached))
    assert limit.resets_at == datetime.fromtimestamp(reset, UTC)
    assert isinstance(events[-1], TurnFinished) and events[-1].is_error


async def test_a_limit_without_a_reset_time_is_tried_again_after_a_while(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """An API key's 429 names no reset: the task waits DETACH_LIMIT_RETRY_S and tries again."""
    limited = {"error": {"status": 429, "type": "rate_limit_error", "message": "slow down"}}
    anthropic.script("MARK-KLIMIT", [{**limited, "times": 1, "then": {"text": "K done"}}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, limit_retry_s=3)
        async with running_bot(settings, agent_env):
            await fake.user_message("/claude MARK-KLIMIT go", OWNER)
            notice = await fake.wait_text(OWNER, "waits for Claude's usage limit", timeout_s=60)
            assert "did not say when it resets" in notice.params["text"]
            await fake.wait_text(OWNER, "K done", timeout_s=60)
    assert len(anthropic.requests_for("MARK-KLIMIT")) >= 2  # limited, then again


async def test_codex_reports_its_usage_limit_with_the_reset(codex_bin, codex_env, openai, workdir):
    resets = int(time.time()) + 3 * 3600
    body = {
        "type": "usage_limit_reached",
        "message": "The usage limit has been reached",
        "plan_type": "plus",
        "resets_at": resets,
        "resets_in_seconds": 3 * 3600,
    }
    openai.script("MARK-CLIMIT", [{"http_error": 429, "error_body": body}])
    executor = CodexExecutor(codex_bin, codex_env)
    async with asyncio.timeout(60):
        events = [e async for e in executor.run(spec("MARK-CLIMIT go", workdir), NoApprovals())]
    (limit,) = [e for e in events if isinstance(e, LimitReached)]
    assert limit.resets_at is not None  # the message has minutes only: within the minute
    assert abs(limit.resets_at.timestamp() - resets) < 61
    assert isinstance(events[-1], TurnFinished) and events[-1].is_error


async def test_a_limited_task_waits_with_its_engine_and_both_go_on_in_order_at_the_reset(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, anthropic, openai, workdir
):
    """A user in Berlin. Claude's plan limit parks the first task (the notice says the reset in
    Berlin time, with Cancel); a second Claude task sent meanwhile waits without reaching the
    model; a Codex task runs and finishes meanwhile; at the reset both Claude tasks go on by
    themselves, the one that waited longest first, each with one line, and finish."""
    reset = int(time.time()) + 8
    anthropic.script("MARK-PA", [{**unified_limit(reset), "times": 1, "then": {"text": "A done"}}])
    anthropic.script("MARK-PB", [{"text": "B done"}])
    openai.script("MARK-PC", [{"text": "C done"}])
    expected = local_time(datetime.fromtimestamp(reset, UTC), "Europe/Berlin")
    env = {**subscription(agent_env), **codex_env}
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            codex_bin=codex_bin,
            max_concurrent_turns=1,
        )
        async with running_bot(settings, env) as app:
            await fake.user_message("/tz Europe/Berlin", OWNER)
            await fake.wait_text(OWNER, "Europe/Berlin", timeout_s=10)
            await fake.user_message("/claude MARK-PA go", OWNER)
            notice = await fake.wait_text(OWNER, "waits for Claude's usage limit", timeout_s=60)
            assert f"resets at {expected}" in notice.params["text"], notice.params["text"]
            assert "Cancel" in json.dumps(notice.params["reply_markup"], ensure_ascii=False)
            assert not notice.params.get("disable_notification")  # a limit makes the phone buzz
            a = (await app.store.tasks.list_for(OWNER, None, 5))[0]
            assert a.status is TaskStatus.WAITING_FOR_LIMIT
            await fake.user_message("/claude MARK-PB go", OWNER)
            ack = await fake.wait_text(OWNER, "mark-pb-go", timeout_s=10)
            assert "waiting for the usage limit" in ack.params["text"]
            await fake.user_message("/status", OWNER)
            status = await fake.wait_text(OWNER, "usage limit reached, until", timeout_s=10)
            assert f"claude: usage limit reached, until {expected}" in status.params["text"]
            await fake.user_message("/codex MARK-PC go", OWNER)
            await fake.wait_text(OWNER, "C done", timeout_s=60)
            assert time.time() < reset  # Codex ran while Claude waited
            assert anthropic.requests_for("MARK-PB") == []
            await fake.wait_text(OWNER, "B done", timeout_s=60)
            await fake.wait_text(OWNER, "A done", timeout_s=10)
            said = [
                c.params["text"] for c in fake.calls if "usage limit has reset" in str(c.params)
            ]
            assert len(said) == 2 and "mark-pa-go" in said[0] and "mark-pb-go" in said[1]
            # the waiting notice's Cancel is gone once the task went on (no stale button)
            cleared = await fake.wait_call(
                "editMessageReplyMarkup",
                lambda c: int(c.params["message_id"]) == notice.result["message_id"],
                timeout_s=10,
            )
            assert not (cleared.params.get("reply_markup") or {}).get("inline_keyboard")
    a_again, b_first = anthropic.requests_for("MARK-PA")[-1], anthropic.requests_for("MARK-PB")[0]
    assert anthropic.requests.index(a_again) < anthropic.requests.index(b_first)


async def test_a_task_waiting_for_a_limit_survives_a_restart(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    reset = int(time.time()) + 10
    anthropic.script("MARK-PR", [{**unified_limit(reset), "times": 1, "then": {"text": "R done"}}])
    env = subscription(agent_env)
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, env):
            await fake.user_message("/claude MARK-PR go", OWNER)
            await fake.wait_text(OWNER, "waits for Claude's usage limit", timeout_s=60)
        async with running_bot(settings, env) as app:  # a new process on the same database
            card = await fake.wait_text(OWNER, "R done", timeout_s=60)
            assert time.time() >= reset - 1
            task = (await app.store.tasks.list_for(OWNER, None, 5))[0]
            assert task.status is TaskStatus.DONE
    assert "done" in card.params["text"]


async def test_a_task_waiting_for_a_limit_can_be_cancelled_from_its_notice(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    reset = int(time.time()) + 6
    anthropic.script("MARK-PX", [{**unified_limit(reset), "times": 1, "then": {"text": "never"}}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, subscription(agent_env)) as app:
            await fake.user_message("/claude MARK-PX go", OWNER)
            notice = await fake.wait_text(OWNER, "waits for Claude's usage limit", timeout_s=60)
            (cancel,) = [
                b["callback_data"]
                for row in notice.params["reply_markup"]["inline_keyboard"]
                for b in row
            ]
            await fake.press(OWNER, notice.result["message_id"], cancel, OWNER)
            async with asyncio.timeout(20):
                while (await app.store.tasks.get(1)).status is not TaskStatus.CANCELLED:
                    await asyncio.sleep(0.1)
            await asyncio.sleep(max(0.0, reset - time.time()) + 1.5)  # past the reset: nothing
    assert len(anthropic.requests_for("MARK-PX")) == 1
    assert not [c for c in fake.calls if "never" in c.params.get("text", "")]
