"""Scheduled and recurring tasks: the times people type, /tz, /every, /at and /schedules with
Pause / Resume / Delete; a run fires through the job pool (APScheduler) and runs as a normal
task; with an injectable clock, runs missed while the bot was down run once at start."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from bot.errors import UserInputError
from bot.models import TaskStatus
from bot.schedules.when import parse_at, parse_every
from bot.settings import Settings
from handlers.schedules import ScheduleAction
from tests.support.fake_telegram import TOKEN
from tests.support.harness import app_in_own_task, wait_sent
from tests.support.recording_session import RecordingSession
from tests.test_handlers import OTHER, OWNER, feed, message, press

NOW = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)  # a Sunday


@pytest.mark.parametrize(
    ("typed", "cron", "rest"),
    [
        ("day 09:00 run the tests", "0 9 * * *", "run the tests"),
        ("weekdays 18:30 model=haiku report", "30 18 * * 1-5", "model=haiku report"),
        ("mon,thu 8:05 x", "5 8 * * mon,thu", "x"),
        ("hourly x", "0 * * * *", "x"),
        ("15m x", "*/15 * * * *", "x"),
        ("2h x", "0 */2 * * *", "x"),
        ("0 9 * * 1-5 x y", "0 9 * * 1-5", "x y"),
    ],
)
def test_every_reads_the_usual_ways_of_saying_when(typed, cron, rest):
    when, left = parse_every(typed, "Europe/Berlin", NOW)
    assert (when.cron, when.tz, left) == (cron, "Europe/Berlin", rest)


def test_every_next_run_is_in_the_owners_zone():
    when, _ = parse_every("day 09:00 x", "Europe/Berlin", NOW)
    assert when.next_after(NOW) == datetime(2026, 11, 30, 8, 0, tzinfo=UTC)  # 09:00 CET


@pytest.mark.parametrize(
    ("typed", "key"),
    [
        ("sometimes x", "schedule.bad_every"),
        ("7m x", "schedule.bad_every"),
        ("61 9 * * * x", "schedule.bad_cron"),
        ("day 25:00 x", "schedule.bad_every"),
        ("0 0 * * 8 x", "schedule.bad_cron"),
        ("0 0 31 2 * x", "schedule.bad_cron"),
    ],
)
def test_every_refuses_what_it_cannot_read(typed, key):
    with pytest.raises(UserInputError) as refused:
        parse_every(typed, "UTC", NOW)
    assert refused.value.key == key


@pytest.mark.parametrize(
    ("typed", "at", "rest"),
    [
        ("20:15 x", datetime(2026, 11, 29, 19, 15, tzinfo=UTC), "x"),  # today, Berlin time
        ("18:30 x", datetime(2026, 11, 30, 17, 30, tzinfo=UTC), "x"),  # passed today: tomorrow
        ("tomorrow 07:00 x", datetime(2026, 11, 30, 6, 0, tzinfo=UTC), "x"),
        ("today 20:15 x", datetime(2026, 11, 29, 19, 15, tzinfo=UTC), "x"),
        ("завтра 07:00 x", datetime(2026, 11, 30, 6, 0, tzinfo=UTC), "x"),
        ("2026-12-01 09:00 x", datetime(2026, 12, 1, 8, 0, tzinfo=UTC), "x"),
        ("2026-12-01T09:00:30 x", datetime(2026, 12, 1, 8, 0, 30, tzinfo=UTC), "x"),
        ("+30m x", NOW + timedelta(minutes=30), "x"),
        ("in 2h x y", NOW + timedelta(hours=2), "x y"),
    ],
)
def test_at_reads_a_moment(typed, at, rest):
    when, left = parse_at(typed, "Europe/Berlin", NOW)
    assert (when.at, left) == (at, rest)


BEFORE_DST = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)  # Berlin moves to CEST on 29 March


def test_clock_times_across_a_daylight_saving_change_keep_the_wall_time():
    at, _ = parse_at("tomorrow 18:30 x", "Europe/Berlin", BEFORE_DST)
    assert at.at == datetime(2026, 3, 29, 16, 30, tzinfo=UTC)  # 18:30 CEST
    every, _ = parse_every("day 09:00 x", "Europe/Berlin", BEFORE_DST)
    assert every.next_after(BEFORE_DST) == datetime(2026, 3, 29, 7, 0, tzinfo=UTC)
    assert every.next_after(datetime(2026, 3, 27, 12, 0, tzinfo=UTC)) == datetime(
        2026, 3, 28, 8, 0, tzinfo=UTC
    )  # still CET the day before


async def test_at_in_a_zone_is_stored_shown_and_fired_at_that_wall_time(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """/at HH:MM in Berlin means Berlin's wall time: listed as typed, stored as the UTC moment,
    and after a restart past it the missed run fires once."""
    anthropic.script("MARK-BERLIN", [{"text": "berlin run"}])
    berlin = ZoneInfo("Europe/Berlin")
    start = datetime.now(UTC).replace(second=0, microsecond=0)
    moment = start + timedelta(hours=2)
    wall = moment.astimezone(berlin)
    clock = Clock(start)
    settings = settings_for(tmp_path, claude_bin, workdir)
    async with app_in_own_task(
        settings, session=RecordingSession(), environ=agent_env, clock=clock
    ) as app:
        await feed(app, message("/tz Europe/Berlin"))
        session = await feed(app, message(f"/at {wall:%H:%M} MARK-BERLIN evening check"))
        assert f"{wall:%Y-%m-%d %H:%M}" in session.new_texts()
        assert (await app.store.schedules.get(1)).run_at == moment
        session = await feed(app, message("/schedules"))
        assert f"{wall:%H:%M}" in session.new_texts()
    clock.now = moment + timedelta(minutes=1)
    async with app_in_own_task(
        settings, session=RecordingSession(), environ=agent_env, clock=clock
    ) as app:
        await wait_done(app, 1)
        assert (await app.store.schedules.get(1)).runs == 1


def test_at_refuses_the_past_and_nonsense():
    for typed, key in (
        ("2025-01-01 09:00 x", "schedule.in_past"),
        ("soon x", "schedule.bad_at"),
        ("2026-02-30 09:00 x", "schedule.bad_at"),
        ("yesterday do it", "schedule.at_past_day"),
    ):
        with pytest.raises(UserInputError) as refused:
            parse_at(typed, "UTC", NOW)
        assert refused.value.key == key


@pytest.mark.parametrize(
    ("typed", "said"),
    [
        ("yesterday do it", "<code>yesterday</code> has passed"),
        ("soon do it", "I cannot read <code>soon</code> as a time"),  # the word, not the goal
        ("tomorrow do it", "I cannot read <code>tomorrow do</code> as a time"),
    ],
)
def test_at_says_which_word_is_not_a_time(typed, said):
    from bot.telegram.texts import Texts

    with pytest.raises(UserInputError) as refused:
        parse_at(typed, "UTC", NOW)
    assert said in Texts().get("en", refused.value.key, **refused.value.params)
    assert Texts().get("ru", refused.value.key, **refused.value.params)


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def settings_for(tmp_path, claude_bin, workdir) -> Settings:
    return Settings(
        _env_file=None,
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER, OTHER}),
        data_dir=tmp_path / "data",
        claude_bin=claude_bin,
        workdir=workdir,
        outbox_chat_interval_s=0,
    )  # type: ignore[call-arg]


async def wait_done(app, task_id: int) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(60):
        while (task := await app.store.tasks.get(task_id)) is None or task.status.active:
            await asyncio.sleep(0.1)
    assert task.status is TaskStatus.DONE


async def test_commands_and_buttons(tmp_path, claude_bin, agent_env, workdir):
    async with app_in_own_task(
        settings_for(tmp_path, claude_bin, workdir), session=RecordingSession(), environ=agent_env
    ) as app:
        session = await feed(app, message("/tz Europe/Berlim"))
        assert "Unknown time zone" in session.new_texts()
        assert "Closest: Europe/Berlin." in session.new_texts()
        session = await feed(app, message("/tz Europe/Berlin"))
        assert "<b>Europe/Berlin</b>" in session.new_texts()
        session = await feed(app, message("/every"))
        assert "Usage" in session.new_texts()
        session = await feed(app, message("/every day 09:00 model=qqqzzz report"))
        assert "No model preset matches" in session.new_texts()  # checked now, not at 9:00
        session = await feed(app, message("/every weekdays 09:00 MARK-SCHED report"))
        added = session.new_texts()
        assert "<b>S1</b>" in added and "<code>0 9 * * 1-5</code> (Europe/Berlin)" in added
        assert "09:00" in added
        session = await feed(app, message("/at tomorrow 07:30 MARK-AT once"))
        assert "<b>S2</b>" in session.new_texts()
        session = await feed(app, message("/schedules"))
        listing = session.sent()[-1]
        assert "S1" in listing.text and "S2" in listing.text
        buttons = [b.callback_data for row in listing.reply_markup.inline_keyboard for b in row]
        pause = ScheduleAction(action="pause", schedule_id=1).pack()
        assert pause in buttons
        await feed(app, press(pause))
        assert (await app.store.schedules.get(1)).state == "paused"
        await feed(app, press(ScheduleAction(action="resume", schedule_id=1).pack()))
        assert (await app.store.schedules.get(1)).state == "active"
        await feed(app, press(ScheduleAction(action="delete", schedule_id=2).pack()))
        assert (await app.store.schedules.get(2)).state == "deleted"
        session = await feed(app, press(ScheduleAction(action="delete", schedule_id=2).pack()))
        assert "No schedule S2 of yours" in session.sent("AnswerCallbackQuery")[-1].text
        session = await feed(
            app, press(ScheduleAction(action="pause", schedule_id=1).pack(), user=OTHER)
        )
        assert "No schedule S1 of yours" in session.sent("AnswerCallbackQuery")[-1].text
        assert (await app.store.schedules.get(1)).state == "active"  # not theirs to pause
        session = await feed(app, message("/schedules", user=OTHER))
        assert "No schedules" in session.new_texts()
        assert await app.store.tasks.get(1) is None  # nothing ran yet


async def test_a_schedule_fires_through_the_pool_and_runs_as_a_task(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-FIRE", [{"text": "scheduled work done"}])
    async with app_in_own_task(
        settings_for(tmp_path, claude_bin, workdir), session=RecordingSession(), environ=agent_env
    ) as app:
        session = await feed(app, message("/at +2s MARK-FIRE check the disk"))
        assert "<b>S1</b>" in session.new_texts()
        assert await app.store.tasks.get(1) is None
        await wait_done(app, 1)  # APScheduler's DateTrigger fired it
        task = await app.store.tasks.get(1)
        assert task.title.startswith("MARK-FIRE check the disk")
        schedule = await app.store.schedules.get(1)
        assert (schedule.state, schedule.runs) == ("done", 1)
        await wait_sent(session, lambda c: "scheduled work done" in c.text)
        ack = next(t for t in session.texts() if "<b>#1 mark-fire-check</b>" in t)
        assert "⏰ from schedule <b>S1</b>" in ack


async def test_missed_runs_are_coalesced_into_one_at_start(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-MISSED", [{"text": "caught up"}])
    start = datetime.now(UTC).replace(microsecond=0)
    clock = Clock(start)
    settings = settings_for(tmp_path, claude_bin, workdir)
    slot = (start + timedelta(hours=2)).strftime("%H:%M")
    async with app_in_own_task(
        settings, session=RecordingSession(), environ=agent_env, clock=clock
    ) as app:
        session = await feed(app, message(f"/every day {slot} MARK-MISSED nightly report"))
        assert "<b>S1</b>" in session.new_texts()

    clock.now = start + timedelta(days=3)  # down for three days: three slots missed
    async with app_in_own_task(
        settings, session=RecordingSession(), environ=agent_env, clock=clock
    ) as app:
        await wait_done(app, 1)
        assert (await app.store.schedules.get(1)).runs == 1
        assert await app.store.tasks.get(2) is None
        assert len(anthropic.requests_for("MARK-MISSED")) == 1

    clock.now = start + timedelta(days=3, hours=1)  # before the next slot: nothing to catch up
    async with app_in_own_task(
        settings, session=RecordingSession(), environ=agent_env, clock=clock
    ) as app:
        assert await app.store.tasks.get(2) is None
        clock.now = start + timedelta(days=3, hours=2)  # the slot comes: the pool fires it
        assert await app.schedules.fire(1)
        await wait_done(app, 2)
        assert not await app.schedules.fire(1)  # the same slot never runs twice
        assert (await app.store.schedules.get(1)).runs == 2
