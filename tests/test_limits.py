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
import re
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

from bot.events import LimitReached, TurnFinished, Usage
from bot.models import ApprovalMode, TaskStatus, TurnSpec
from bot.turns.limits import retry_after_s
from bot.turns.outcome import local_time
from executors.claude import ClaudeExecutor
from executors.claude_protocol import parse_event
from executors.codex import CodexExecutor
from executors.codex_protocol import TurnState, notification_events, try_again_at
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked
from tests.test_approvals_e2e import answer_of, buttons
from tests.test_checks import finished

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
    # a reset on another day names its date (what 0.171.0 prints then)
    assert try_again_at(
        "… credits or try again at Dec 2nd, 2026 12:10 AM.", berlin
    ) == berlin.replace(day=2, hour=0, minute=10)
    assert try_again_at("try again at Jan 1st, 2027 9:05 PM", berlin) == berlin.replace(
        year=2027, month=1, day=1, hour=21, minute=5
    )
    assert try_again_at("try again at Feb 30th, 2027 9:05 PM", berlin) is None


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


async def test_a_limit_without_a_reset_time_is_tried_again_with_a_growing_wait(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """An API key's 429 names no reset: the task waits DETACH_LIMIT_RETRY_S and tries again;
    limited again, it waits twice as long. One notice, updated in place (no buzz per retry),
    and one line when it first goes on; its card says how long it waited."""
    limited = {"error": {"status": 429, "type": "rate_limit_error", "message": "slow down"}}
    anthropic.script("MARK-KLIMIT", [{**limited, "times": 2, "then": {"text": "K done"}}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, limit_retry_s=2)
        async with running_bot(settings, agent_env):
            await fake.user_message("/claude MARK-KLIMIT go", OWNER)
            notice = await fake.wait_text(OWNER, "waits for Claude's usage limit", timeout_s=60)
            assert "did not say when it resets" in notice.params["text"]
            card = await fake.wait_text(OWNER, "K done", timeout_s=60)
            await fake.wait_call(  # the notice's last word: how the task ended
                "editMessageText",
                lambda c: (
                    int(c.params["message_id"]) == notice.result["message_id"]
                    and "done" in c.params["text"]
                ),
                timeout_s=10,
            )
    times = [r["at"] for r in anthropic.requests_for("MARK-KLIMIT")]
    assert len(times) == 3  # limited, limited again, done
    assert times[1] - times[0] >= 2 and times[2] - times[1] >= 4  # 2 s, then 4 s
    sent = [c for c in fake.calls if c.method == "sendMessage"]
    said = [c.params["text"] for c in sent if "usage limit" in c.params["text"]]
    assert len(said) == 3 and "goes on" in said[1] and "K done" in said[2]  # notice, line, card
    edits = [
        c
        for c in fake.calls
        if c.method in ("editMessageText", "editMessageReplyMarkup")
        and int(c.params["message_id"]) == notice.result["message_id"]
    ]
    # going on took the notice's buttons and said so; the second wait gave them back, going on
    # took them again, and the end of the turn is the notice's last word
    assert [bool((c.params.get("reply_markup") or {}).get("inline_keyboard")) for c in edits] == [
        False,
        True,
        False,
        False,
    ]
    assert "went on when it reset · ⏳ running" in edits[0].params["text"]
    assert "went on when it reset · ✅ done" in edits[-1].params["text"]
    assert "⏸ waited " in card.params["text"]


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
            b_card = await fake.wait_text(OWNER, "B done", timeout_s=60)
            a_card = await fake.wait_text(OWNER, "A done", timeout_s=10)
            for card in (a_card, b_card):  # each card says how long its task waited
                assert "⏸ waited " in card.params["text"]
                assert "for Claude's usage limit" in card.params["text"]
            said = [
                c.params["text"] for c in fake.calls if "usage limit has reset" in str(c.params)
            ]
            assert len(said) == 2 and "mark-pa-go" in said[0] and "mark-pb-go" in said[1]
            # the waiting notice's Cancel is gone once the task went on (no stale button), and
            # it ends saying where the task went and how it ended (no stale "waits")
            notice_id = notice.result["message_id"]
            ended = await fake.wait_call(
                "editMessageText",
                lambda c: int(c.params["message_id"]) == notice_id and "done" in c.params["text"],
                timeout_s=10,
            )
            assert not (ended.params.get("reply_markup") or {}).get("inline_keyboard")
            assert "went on when it reset · ✅ done" in fake.find_message(OWNER, notice_id)["text"]
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
    """Without another engine the notice offers Wait and Cancel; Wait leaves Cancel only."""
    reset = int(time.time()) + 6
    anthropic.script("MARK-PX", [{**unified_limit(reset), "times": 1, "then": {"text": "never"}}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, subscription(agent_env)) as app:
            await fake.user_message("/claude MARK-PX go", OWNER)
            notice = await fake.wait_text(OWNER, "waits for Claude's usage limit", timeout_s=60)
            offered = buttons(notice)
            assert list(offered) == ["⏳ Wait", "Cancel"]  # no other engine to run on here
            forged = await fake.press(OWNER, notice.result["message_id"], "t:run_gpt:1", OWNER)
            assert "gpt engine is not available" in await answer_of(fake, forged)
            same = await fake.press(OWNER, notice.result["message_id"], "t:run_claude:1", OWNER)
            assert "claude engine is not available" in await answer_of(fake, same)
            query = await fake.press(OWNER, notice.result["message_id"], offered["⏳ Wait"], OWNER)
            assert "goes on by itself" in await answer_of(fake, query)
            await fake.wait_call(
                "editMessageReplyMarkup",
                lambda c: (
                    int(c.params["message_id"]) == notice.result["message_id"]
                    and "Wait" not in json.dumps(c.params.get("reply_markup"), ensure_ascii=False)
                ),
                timeout_s=10,
            )
            await fake.press(OWNER, notice.result["message_id"], offered["Cancel"], OWNER)
            async with asyncio.timeout(20):
                while (await app.store.tasks.get(1)).status is not TaskStatus.CANCELLED:
                    await asyncio.sleep(0.1)
            # Wait on a task that no longer waits is answered, not acted on
            query = await fake.press(OWNER, notice.result["message_id"], offered["⏳ Wait"], OWNER)
            assert "is not waiting for a usage limit" in await answer_of(fake, query)
            await asyncio.sleep(max(0.0, reset - time.time()) + 1.5)  # past the reset: nothing
    assert len(anthropic.requests_for("MARK-PX")) == 1
    assert not [c for c in fake.calls if "never" in c.params.get("text", "")]


def git(workdir: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
        cwd=workdir,
        check=True,
        capture_output=True,
    )


async def test_run_on_codex_now_carries_the_task_over_with_goal_summary_and_diff(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, anthropic, openai, workdir
):
    """Claude's first turn finds the bug; its follow-up hits the plan's limit (reset in two
    hours). The notice offers Run on Codex now: pressed, the task goes on with Codex in a new
    session whose first model request holds the goal, what Claude said so far, the directory's
    uncommitted diff and the follow-up; the card comes from Codex under the same label; a
    reply continues on Codex; Claude is not asked again; the stale button is answered."""
    git(workdir, "init", "-q")
    (workdir / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    git(workdir, "add", "calc.py")
    git(workdir, "commit", "-q", "-m", "calc")
    reset = int(time.time()) + 2 * 3600
    anthropic.script(
        "MARK-SW",
        [{"text": "Found it: add() in calc.py subtracts. Fixed that line."}, unified_limit(reset)],
    )
    openai.script("MARK-SW", [{"text": "SW finished on Codex."}, {"text": "SW docs on Codex."}])
    env = {**subscription(agent_env), **codex_env}
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin)
        async with running_bot(settings, env) as app:
            await fake.user_message("/claude MARK-SW fix the calculator", OWNER)
            first = await fake.wait_text(OWNER, "Found it", timeout_s=60)
            (workdir / "calc.py").write_text("def add(a, b):\n    return a + b\n")  # its edit
            await wait_linked(app, OWNER, first.result["message_id"])
            await fake.user_message(
                "now add a test for add()", OWNER, reply_to_message_id=first.result["message_id"]
            )
            notice = await fake.wait_text(OWNER, "waits for Claude's usage limit", timeout_s=60)
            offered = buttons(notice)
            assert list(offered) == ["▶️ Run on Codex now", "⏳ Wait", "Cancel"]
            mark = len(fake.calls)
            query = await fake.press(
                OWNER, notice.result["message_id"], offered["▶️ Run on Codex now"], OWNER
            )
            assert "goes on with Codex" in await answer_of(fake, query)
            said = await fake.wait_text(OWNER, "goes on with Codex", timeout_s=10, after=mark)
            assert said.params.get("disable_notification")  # they just pressed it: no buzz
            card = await fake.wait_text(OWNER, "SW finished on Codex.", timeout_s=60)
            assert "#1 mark-sw-fix</b>" in card.params["text"]  # the same task
            task = await app.store.tasks.get(1)
            assert task.engine == "codex" and task.session_id and task.status is TaskStatus.DONE
            # the notice says where the task went and how it ended, without its buttons
            notice_id = notice.result["message_id"]
            ended = await fake.wait_call(
                "editMessageText",
                lambda c: int(c.params["message_id"]) == notice_id and "done" in c.params["text"],
                timeout_s=10,
            )
            assert not (ended.params.get("reply_markup") or {}).get("inline_keyboard")
            assert (
                "waited for Claude's usage limit, then went on with Codex · ✅ done"
                in fake.find_message(OWNER, notice_id)["text"]
            )
            query = await fake.press(
                OWNER, notice.result["message_id"], offered["▶️ Run on Codex now"], OWNER
            )
            assert "is not waiting for a usage limit" in await answer_of(fake, query)
            await wait_linked(app, OWNER, card.result["message_id"])
            await fake.user_message(
                "and document it", OWNER, reply_to_message_id=card.result["message_id"]
            )
            await fake.wait_text(OWNER, "SW docs on Codex.", timeout_s=60)
    first_request = openai.requests_for("MARK-SW")[0]["user_text"]
    assert "## The goal\nMARK-SW fix the calculator" in first_request
    assert "Found it: add() in calc.py subtracts." in first_request  # the summary
    assert "-    return a - b\n+    return a + b" in first_request  # the directory's diff
    assert first_request.rstrip().endswith("now add a test for add()")  # what it waited with
    assert len(anthropic.requests_for("MARK-SW")) == 2  # the first turn, the limited one
    assert "and document it" in openai.requests[-1]["user_text"]


def test_retries_of_a_limit_without_a_reset_time_back_off():
    assert [retry_after_s(900, n) for n in range(6)] == [900, 1800, 3600, 7200, 14400, 21600]
    assert retry_after_s(900, 1000) == 6 * 3600
    assert retry_after_s(8 * 3600, 3) == 8 * 3600  # a base longer than the cap is kept


async def test_a_codex_limit_parks_its_task_and_run_on_claude_now_finishes_it(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, anthropic, openai, workdir
):
    """The other way round, through the whole bot: Codex's usage limit parks a /codex task
    (the notice says the reset in the user's zone and offers Claude); Run on Claude now
    finishes it on Claude, whose first request carries the goal (no repository: no diff)."""
    resets = int(time.time()) + 3 * 3600
    body = {"type": "usage_limit_reached", "resets_at": resets, "resets_in_seconds": 3 * 3600}
    openai.script("MARK-CW", [{"http_error": 429, "error_body": body}])
    anthropic.script("MARK-CW", [{"text": "CW done on Claude."}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin)
        async with running_bot(settings, {**agent_env, **codex_env}) as app:
            await fake.user_message("/tz Asia/Tokyo", OWNER)
            await fake.wait_text(OWNER, "Asia/Tokyo", timeout_s=10)
            await fake.user_message("/codex MARK-CW tidy the readme", OWNER)
            notice = await fake.wait_text(OWNER, "waits for Codex's usage limit", timeout_s=60)
            assert "(Asia/Tokyo)" in notice.params["text"]
            offered = buttons(notice)
            assert list(offered) == ["▶️ Run on Claude now", "⏳ Wait", "Cancel"]
            await fake.press(
                OWNER, notice.result["message_id"], offered["▶️ Run on Claude now"], OWNER
            )
            await fake.wait_text(OWNER, "CW done on Claude.", timeout_s=60)
            task = await app.store.tasks.get(1)
            assert task.engine == "claude" and task.status is TaskStatus.DONE
            await fake.user_message("/status", OWNER)
            status = await fake.wait_text(OWNER, "usage limit reached, until", timeout_s=10)
            assert "codex: usage limit reached, until" in status.params["text"]
    (first,) = anthropic.requests_for("MARK-CW")
    assert "## The goal\nMARK-CW tidy the readme" in first["first_user_text"]
    assert "another agent (Codex)" in first["first_user_text"]
    assert "not a git repository" in first["first_user_text"]
    assert len(openai.requests_for("MARK-CW")) == 1


async def test_a_burst_of_tasks_meets_the_limit_and_each_waits_once_and_goes_on_in_order(
    tmp_path, workdir
):
    """Twelve tasks sent at once (two run at a time) meet the plan's limit: none fails, each
    gets exactly one notice, those already submitted are parked at their claim without
    running, and after the reset they start oldest first, each with one line and its card."""
    # the limit resets 4 s after the first turn meets it: the bot's start is not in that
    # window (on a loaded machine it took most of 4 s, and tasks ran without waiting)
    resets: list[datetime] = []

    def script(spec: TurnSpec) -> tuple:
        if not resets:
            resets.append(datetime.now(UTC) + timedelta(seconds=4))
        reset = resets[0]
        if datetime.now(UTC) < reset:
            limited = TurnFinished(
                is_error=True,
                result_text="You've hit your session limit",
                session_id="s",
                cost_usd=None,
                usage=Usage(),
            )
            return (LimitReached(reset, "five_hour"), limited)
        return finished(f"burst {spec.task_id} done")

    engine = FakeEngine(script)
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir, max_concurrent_turns=2)
        async with running_bot(settings, {}, executors={"claude": engine}) as app:
            for n in range(12):
                await fake.user_message(f"/claude mode=ask burst task {n}", OWNER)
            for n in range(1, 13):
                await fake.wait_text(OWNER, f"burst {n} done", timeout_s=60)
            tasks = await app.store.tasks.list_for(OWNER, None, 20)
            assert {t.status for t in tasks} == {TaskStatus.DONE}
    texts = [c.params["text"] for c in fake.calls if c.method == "sendMessage"]
    # twelve updates are handled side by side: task #n is one of the burst, not always the nth
    # message (on aiosqlite their creations interleave); each label belongs to one task
    labels = {re.search(r"#(\d+) (burst-task-\d+)<", t) for t in texts}
    named = {m.group(1): m.group(2) for m in labels if m is not None}
    assert len(named) == 12 and len(set(named.values())) == 12, named
    for n in range(1, 13):
        mine = [t for t in texts if f"#{n} {named[str(n)]}<" in t]
        notices = [t for t in mine if "waits for Claude" in t]
        waiting_acks = [t for t in mine if "waiting for the usage limit" in t]
        assert len(notices) + len(waiting_acks) == 1, (n, mine)  # told once that it waits
        assert len([t for t in mine if "limit has reset" in t]) == 1, (n, mine)
    assert not [t for t in texts if "failed" in t]
    ran_after = [s.task_id for s in engine.specs][-12:]
    assert sorted(ran_after) == list(range(1, 13)), engine.specs  # each once
    # oldest first: claimed in order; the two slots' turns then race to their agents, so a turn
    # may reach its agent just before the one claimed a moment before it, never later
    assert all(abs(task_id - n) <= 1 for n, task_id in enumerate(ran_after, 1)), ran_after


async def test_the_handover_prompt_holds_what_happened_and_not_what_is_queued_behind(tmp_path):
    from bot.models import NewTask, TaskKind
    from bot.store import Store, TurnOutcome
    from bot.tasks.handover import handover_prompt
    from executors.gitguard import GitGuard

    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite")
    try:
        new = NewTask(OWNER, OWNER, "claude", TaskKind.SESSION, "MARK goal: fix it", tmp_path)
        task, first = await store.tasks.create(new, "fix")
        claimed = await store.claims.claim_turn(first.id)
        assert claimed is not None
        await store.transcript.append(task.id, first.id, [("TextEmitted", {"text": "found it"})])
        await store.tasks.finish_turn(claimed[1], TurnOutcome(TaskStatus.DONE, "found it"))
        waiting = await store.tasks.add_turn(task.id, "now the tests")
        await store.tasks.add_turn(task.id, "and later the docs")
        prompt = await handover_prompt(store, GitGuard(), task, waiting)
    finally:
        await store.close()
    assert "## The goal\nMARK goal: fix it" in prompt
    assert "💬 found it" in prompt
    assert prompt.rstrip().endswith("## Now\nnow the tests")
    assert "later the docs" not in prompt  # queued behind: the new session gets it as a turn
    assert "(not a git repository" in prompt
