"""Scheduled and recurring tasks: /every and /at in the owner's time zone (/tz), listed by
/schedules with Pause and Delete. The app's ``schedules`` table is the record; APScheduler
schedules are (re)built from it at start and fire each run, which starts a normal task (its
preflight may hold it for the owner, as a command's). Runs
missed while the bot was down are run once at start, not once per missed slot. The clock is
injectable, so catch-up and firing are tested without waiting for 09:00."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from bot.errors import UserInputError
from bot.models import NewTask, ScheduleState, TaskKind
from bot.rows import PreflightHold, Schedule
from bot.schedules.timer import ScheduleTimer, When
from bot.schedules.when import describe, parse_at, parse_every, zone
from bot.tasks.options import split_options
from bot.tasks.requests import TaskRequests
from bot.tasks.scheduling import ScheduleBook
from bot.telegram.outbox import Outbox
from bot.telegram.render import plain
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)
DEFAULT_TZ = "UTC"
EARLY_S = 5.0  # a fire this close before its slot still counts as that slot's run
ACTIVE = ScheduleState.ACTIVE
NOW = functools.partial(datetime.now, UTC)  # the clock, but in tests


def resolved(options: dict[str, str], prompt: str, new: NewTask) -> str:
    """A schedule's options and goal as they were resolved when it was made (``model=sonet``
    stored and shown as the preset it matched), so every run and /schedules read the same."""
    if "model" in options and new.preset:
        options = {**options, "model": new.preset}
    return " ".join([*(_typed(k, v) for k, v in options.items()), prompt])


def _typed(key: str, value: str) -> str:
    """One option as ``split_options`` reads it back."""
    if value and not any(c.isspace() for c in value):
        return f"{key}={value}"
    return f"{key}='{value}'" if '"' in value else f'{key}="{value}"'


def when_of(schedule: Schedule) -> When:
    return When(cron=schedule.cron, at=schedule.run_at, tz=schedule.tz)


@dataclass(frozen=True, slots=True)
class Listed:
    schedule: Schedule
    next_run: datetime | None


class ScheduleDesk:
    def __init__(
        self,
        *,
        book: ScheduleBook,
        timer: ScheduleTimer,
        service: TaskRequests,
        outbox: Outbox,
        texts: Texts,
        default_tz: str = DEFAULT_TZ,
        clock: Callable[[], datetime] = NOW,
    ) -> None:
        self._book = book
        self._timer = timer
        self._service = service
        self._outbox = outbox
        self._texts = texts
        self._default_tz = default_tz
        self._clock = clock

    # -- the user's side ---------------------------------------------------------------------
    async def tz(self, user_id: int) -> str:
        return await self._book.tz(user_id) or self._default_tz

    async def set_tz(self, user_id: int, name: str) -> str:
        key = zone(name.strip()).key
        await self._book.set_tz(user_id, key)
        return key

    async def add(self, user_id: int, chat_id: int, locale: str, command: str, text: str) -> Listed:
        """/every or /at: the time first, then the task's options and goal (checked now, so a
        bad model or directory fails here, not at 3 a.m.)."""
        tz = await self.tz(user_id)
        when, rest = (
            parse_every(text, tz, self._clock())
            if command == "every"
            else parse_at(text, tz, self._clock())
        )
        options, prompt = split_options(rest)
        typed_when = " ".join(text.split()[: len(text.split()) - len(rest.split())])
        new = await self._service.plan(  # a goal missing: its example keeps the typed time
            user_id, chat_id, TaskKind.DETACH, options, prompt, locale, f"{command} {typed_when}"
        )
        text = resolved(options, prompt, new)
        schedule = await self._book.add(user_id, chat_id, (when.cron, when.at), tz, text, locale)
        await self._timer.set(schedule.id, when)
        return Listed(schedule, when.next_after(self._clock()))

    async def list(self, user_id: int) -> list[Listed]:
        now = self._clock()
        return [
            Listed(s, when_of(s).next_after(now) if s.state == ACTIVE else None)
            for s in await self._book.listed(user_id)
        ]

    async def pause(self, user_id: int, schedule_id: int) -> Schedule:
        schedule = await self._book.own(user_id, schedule_id)
        await self._book.pause(schedule)
        await self._timer.remove(schedule.id)
        return schedule

    async def resume(self, user_id: int, schedule_id: int) -> Schedule:
        """Runs missed while paused are not caught up: it goes on from now."""
        schedule = await self._book.own(user_id, schedule_id)
        await self._book.resume(schedule)
        await self._timer.set(schedule.id, when_of(schedule))
        return schedule

    async def delete(self, user_id: int, schedule_id: int) -> Schedule:
        schedule = await self._book.own(user_id, schedule_id)
        await self._book.delete(schedule)
        await self._timer.remove(schedule.id)
        return schedule

    # -- the engine's side -------------------------------------------------------------------
    async def start(self) -> int:
        """At start: run once what was missed while down, then register every active schedule
        with the timer. Returns how many missed runs were started."""
        caught_up = 0
        for schedule in await self._book.active():
            if await self.fire(schedule.id):
                caught_up += 1
            fresh = await self._book.get(schedule.id)
            if fresh is not None and fresh.state == ACTIVE:
                await self._timer.set(schedule.id, when_of(fresh))
        if caught_up:
            log.info("%s schedule run(s) missed while down started once each", caught_up)
        return caught_up

    async def on_fire(self, schedule_id: int) -> None:
        """The timer's call when a schedule fires; a failure is logged, never raised into
        the scheduler."""
        try:
            await self.fire(schedule_id)
        except Exception:  # deliberate: a failing run must not reach (and stop) the scheduler
            log.exception("schedule %s failed to fire", schedule_id)

    async def fire(self, schedule_id: int) -> bool:
        """Start this schedule's run if one is due (one run however many slots were missed);
        False when none is due, or it is paused or gone."""
        schedule = await self._book.get(schedule_id)
        if schedule is None or schedule.state != ACTIVE:
            return False
        now = self._clock()
        due = when_of(schedule).next_after(schedule.last_run_at or schedule.created_at)
        if due is None or due > now + timedelta(seconds=EARLY_S):
            return False
        await self._book.ran(schedule, now)
        try:
            options, prompt = split_options(schedule.text)
            new = await self._service.plan(
                schedule.owner_id,
                schedule.chat_id,
                TaskKind.DETACH,
                options,
                prompt,
                schedule.locale,
                "every" if schedule.cron else "at",
            )
            started = await self._service.walk_away(
                replace(
                    new,
                    origin=self._texts.get(
                        schedule.locale,
                        "schedule.origin",
                        ref=f"S{schedule.id}",
                        when=describe(when_of(schedule)),
                    ),
                ),
                options,
            )
        except UserInputError as exc:
            reason = plain(self._texts.get(schedule.locale, exc.key, **exc.params))
            log.warning("schedule %s could not start: %s", schedule.id, reason)
            await self._outbox.send(
                schedule.chat_id,
                self._texts.get(
                    schedule.locale, "schedule.run_failed", ref=f"S{schedule.id}", reason=reason
                ),
            )
            return True
        ref = f"S{schedule.id}"
        if isinstance(started, PreflightHold):  # its owner answers in the chat, as to a command
            await self._book.started(schedule, None)
            log.info("schedule %s: its run is held by its preflight (hold %s)", ref, started.id)
            return True
        await self._book.started(schedule, started.id)
        log.info("schedule %s started task %s", schedule.id, started.id)
        return True

    def describe(self, listed: Listed, locale: str) -> dict[str, str]:
        """The placeholders the locale's schedule lines use, its next run in ``locale``."""
        s = listed.schedule
        return {
            "ref": f"S{s.id}",
            "when": describe(when_of(s)),
            "tz": s.tz,
            "next": (
                self._texts.moment(locale, listed.next_run.astimezone(zone(s.tz)))
                if listed.next_run
                else "–"
            ),
            "goal": s.text[:120],
            "runs": str(s.runs),
        }
