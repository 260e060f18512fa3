"""Reset times that cannot be true, and times too far ahead to schedule.

- A usage limit's reset in the past, or further ahead than any plan's window (LIMIT_HORIZON),
  is "no reset time": the growing retry of DETACH_LIMIT_RETRY_S, never a CLI restarted in a
  loop nor every later task held behind a reset 80 years away.
- One task's answer never shortens the limit the engine's other tasks wait for.
- /at more than a year ahead (9999-12-31 in UTC-12 included) is a clear refusal.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import pytest

from bot.errors import UserInputError
from bot.events import ApprovalRequest, LimitReached, TurnFinished, Usage
from bot.models import TaskStatus, TurnSpec
from bot.schedules.when import AT_HORIZON, parse_at
from bot.store.engine_state import LIMIT_HORIZON
from bot.turns.limits import believed
from bot.turns.pool import JobPool
from bot.turns.queue import TurnQueue
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.postgres import STORE_KINDS, opened_store
from tests.support.recording_session import RecordingSession
from tests.test_checks import finished
from tests.test_handlers import feed, message
from tests.test_limits import subscription, unified_limit
from tests.test_schedules import settings_for

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def test_a_reset_in_the_past_or_beyond_any_plans_window_is_no_reset_time():
    assert believed(NOW + timedelta(hours=5), NOW) == NOW + timedelta(hours=5)
    assert believed(NOW + LIMIT_HORIZON, NOW) == NOW + LIMIT_HORIZON  # a weekly limit
    assert believed(NOW - timedelta(seconds=1), NOW) is None
    assert believed(NOW, NOW) is None
    assert believed(NOW + LIMIT_HORIZON + timedelta(seconds=1), NOW) is None
    assert believed(NOW.replace(year=2106), NOW) is None
    assert believed(None, NOW) is None


async def test_a_reset_in_the_past_does_not_restart_the_cli_in_a_loop(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """The plan's limit answers with a reset an hour ago, twice: the task waits
    DETACH_LIMIT_RETRY_S (2 s), then twice as long, and is not released at once to meet the
    limit again (the bug: 38 CLI starts in 47 s)."""
    past = int(time.time()) - 3600
    limited = {**unified_limit(past), "times": 2, "then": {"text": "past done"}}
    anthropic.script("MARK-PAST", [limited])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, limit_retry_s=2)
        async with running_bot(settings, subscription(agent_env)) as app:
            await fake.user_message("/claude MARK-PAST go", OWNER)
            notice = await fake.wait_text(OWNER, "waits for Claude's usage limit", timeout_s=60)
            assert "did not say when it resets" in notice.params["text"]
            await asyncio.sleep(
                1.5
            )  # the window the old code restarted the CLI in, again and again
            assert len(anthropic.requests_for("MARK-PAST")) == 1
            await fake.wait_text(OWNER, "past done", timeout_s=60)
            task = await app.store.tasks.get(1)
            assert task is not None and task.status is TaskStatus.DONE
    times = [r["at"] for r in anthropic.requests_for("MARK-PAST")]
    assert len(times) == 3  # limited, limited again, done: one CLI start each
    assert times[1] - times[0] >= 2 and times[2] - times[1] >= 4


async def test_a_reset_eighty_years_ahead_holds_no_task_behind_it(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    far = int((datetime.now(UTC) + timedelta(days=80 * 365)).timestamp())
    anthropic.script("MARK-FAR", [{**unified_limit(far), "times": 1, "then": {"text": "far done"}}])
    anthropic.script("MARK-NEXT", [{"text": "next done"}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, limit_retry_s=2)
        async with running_bot(settings, subscription(agent_env)) as app:
            await fake.user_message("/claude MARK-FAR go", OWNER)
            notice = await fake.wait_text(OWNER, "waits for Claude's usage limit", timeout_s=60)
            assert "did not say when it resets" in notice.params["text"]
            limits = await app.store.limits.active()
            assert limits["claude"] - datetime.now(UTC) < timedelta(minutes=1)
            await fake.wait_text(OWNER, "far done", timeout_s=60)
            await fake.user_message("/claude MARK-NEXT go", OWNER)  # not held for 80 years
            await fake.wait_text(OWNER, "next done", timeout_s=60)


@pytest.fixture(params=STORE_KINDS)
async def store(request, tmp_path):  # type: ignore[no-untyped-def]
    """A store on a real SQLite file and on the machine's PostgreSQL, with the real clock."""
    async with opened_store(request.param, tmp_path) as opened:
        yield opened


async def test_the_engines_limit_only_moves_later_while_it_holds(store):
    queue = TurnQueue(store, JobPool("test", 1, 60))
    other = TurnQueue(store, JobPool("other", 1, 60))  # another process's view
    now = datetime.now(UTC).replace(microsecond=0)
    hour, minutes = now + timedelta(hours=1), now + timedelta(minutes=5)
    assert await queue.limit("claude", hour) == hour
    assert await other.limit("claude", minutes) == hour  # not shortened
    assert await queue.limited_until("claude") == hour
    assert (await store.limits.active())["claude"] == hour
    later = now + timedelta(hours=3)
    assert await other.limit("claude", later) == later  # moved later
    assert await other.limit("codex", minutes) == minutes  # engines apart
    # a limit that lifted does not hold a new, earlier one back
    await store.limits.extend("gpt", now - timedelta(hours=2))
    assert await queue.limit("gpt", minutes) == minutes


def _limited(reset: datetime) -> tuple:  # type: ignore[type-arg]
    final = TurnFinished(
        is_error=True,
        result_text="You've hit your limit",
        session_id="s",
        cost_usd=None,
        usage=Usage(),
    )
    return (LimitReached(reset, "five_hour"), final)


async def test_one_tasks_sooner_reset_does_not_release_the_others(tmp_path, workdir):
    """Task 2 meets the limit, which resets in an hour; task 1, running meanwhile (waiting for
    an approval), then says 3 s: both keep waiting for the hour (the bug: every waiting task
    was released at the sooner time, each to meet the limit again)."""
    hour = datetime.now(UTC) + timedelta(hours=1)
    ask = ApprovalRequest("Bash", {"command": "make"}, "t1", "Bash(make:*)")

    def script(spec: TurnSpec) -> tuple:  # type: ignore[type-arg]
        if spec.task_id == 1:
            return (ask, *_limited(datetime.now(UTC) + timedelta(seconds=3)))
        if spec.task_id == 2:
            return _limited(hour)
        return finished("never")

    engine = FakeEngine(script)
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir, max_concurrent_turns=2)
        async with running_bot(settings, {}, executors={"claude": engine}) as app:
            await fake.user_message("/claude mode=ask asks first", OWNER)
            request = await fake.wait_text(OWNER, "wants to use", timeout_s=30)
            await fake.user_message("/claude mode=ask meets the limit", OWNER)
            await fake.wait_text(OWNER, "resets at", timeout_s=30)
            allow = request.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
            await fake.press(OWNER, request.result["message_id"], allow, OWNER)
            async with asyncio.timeout(30):
                while (await app.store.tasks.get(1)).status is not TaskStatus.WAITING_FOR_LIMIT:
                    await asyncio.sleep(0.1)
            until = (await app.store.limits.active())["claude"]
            assert abs((until - hour).total_seconds()) < 1, until
            await asyncio.sleep(5)  # past the sooner reset
            assert len(engine.specs) == 2  # neither ran again
            for task_id in (1, 2):
                task = await app.store.tasks.get(task_id)
                assert task is not None and task.status is TaskStatus.WAITING_FOR_LIMIT


@pytest.mark.parametrize(
    ("typed", "tz"),
    [
        ("9999-12-31 23:59 x", "Etc/GMT+12"),
        ("9999-12-31T23:59 x", "Etc/GMT+12"),
        ("9999-12-31 23:59 x", "Etc/GMT-14"),
        ("+9999d x", "UTC"),
        ("2028-01-01 09:00 x", "UTC"),
    ],
)
def test_at_further_than_a_year_is_refused(typed, tz):
    with pytest.raises(UserInputError) as refused:
        parse_at(typed, tz, NOW)
    assert refused.value.key == "schedule.too_far"
    assert refused.value.params["days"] == AT_HORIZON.days


def test_at_within_a_year_is_taken():
    when, rest = parse_at("2027-12-04 09:00 x", "Etc/GMT+12", NOW)
    assert when.at == datetime(2027, 12, 4, 21, 0, tzinfo=UTC) and rest == "x"


async def test_at_the_end_of_time_in_a_minus_12_zone_is_a_clear_reply(
    tmp_path, claude_bin, workdir
):
    from tests.support.harness import app_in_own_task

    async with app_in_own_task(
        settings_for(tmp_path, claude_bin, workdir), session=RecordingSession(), environ={}
    ) as app:
        await feed(app, message("/tz Etc/GMT+12"))
        session = await feed(app, message("/at 9999-12-31 23:59 celebrate"))
        reply = session.new_texts()
        assert "<code>9999-12-31 23:59</code> is more than a year ahead" in reply, reply
        assert f"within {AT_HORIZON.days} days" in reply
        assert await app.store.schedules.get(1) is None
