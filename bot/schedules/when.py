"""What people type for /every and /at, read into a crontab line or one moment, in their zone.

/every: ``day 09:00``, ``weekdays 18:30``, ``mon,thu 08:00``, ``hour``, ``15m``, ``2h``, or a
crontab line (``0 9 * * 1-5``). /at: ``09:00`` (the next one), ``tomorrow 09:00``,
``2026-12-01 09:00``, ``2026-12-01T09:00:30``, ``+30m``, ``in 2h``, at most AT_HORIZON ahead."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from bot.errors import UserInputError
from bot.schedules.timer import When

_TIME = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")
_DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_SPAN = re.compile(r"\+?(\d{1,4})(s|m|h|d)")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
AT_HORIZON = timedelta(days=366)  # /at further ahead is refused: a typo more likely than a plan
_DAYS_AHEAD = {"today": 0, "tomorrow": 1, "сегодня": 0, "завтра": 1}  # before a time
_PAST_DAYS = {"yesterday", "вчера", "позавчера"}  # /at runs once, ahead


def zone(name: str) -> ZoneInfo:
    """A time zone by its IANA name; a typo gets the closest names back."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        from rapidfuzz import fuzz, process  # only for a typo: 3.5 MB the idle bot does without

        close = process.extract(
            name,
            sorted(available_timezones()),
            scorer=fuzz.WRatio,
            processor=str.lower,
            limit=3,
            score_cutoff=80,
        )
        raise UserInputError(
            "schedule.bad_tz", tz=name, close=", ".join(match for match, _, _ in close) or "–"
        ) from None


def _day_list(word: str) -> str | None:
    days = [d[:3] for d in word.lower().split(",")]
    if all(d in _DAYS for d in days) and all(
        w.lower().startswith(d) for w, d in zip(word.split(","), days, strict=True)
    ):
        return ",".join(days)
    return None


_DAILY = ("day", "daily", "everyday")
_WEEKDAYS = ("weekday", "weekdays", "workday", "workdays")
_EVERY_MINUTES = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)  # those that divide an hour
_EVERY_HOURS = (1, 2, 3, 4, 6, 8, 12)  # those that divide a day
_CRON_FIELD = re.compile(r"[0-9a-zA-Z*/,\-]+")


def _at_clock(head: str, clock: re.Match[str] | None) -> str | None:
    """``day 09:00``, ``weekdays 18:30``, ``mon,thu 08:00`` -> a crontab line."""
    if clock is None:
        return None
    days = "*" if head in _DAILY else "1-5" if head in _WEEKDAYS else _day_list(head)
    return f"{int(clock[2])} {int(clock[1])} * * {days}" if days else None


def _every_span(head: str) -> str | None:
    """``hour``, ``15m``, ``2h`` -> a crontab line (spans that divide an hour or a day)."""
    if head in ("hour", "hourly"):
        return "0 * * * *"
    span = re.fullmatch(r"(\d{1,2})(m|h)", head)
    if span is None:
        return None
    n, unit = int(span[1]), span[2]
    if unit == "m":
        return f"*/{n} * * * *" if n in _EVERY_MINUTES else None
    return f"0 */{n} * * *" if n in _EVERY_HOURS else None


def _recurrence(words: list[str]) -> tuple[str, int] | None:
    """The crontab line the first words say, and how many words that took."""
    if not words:
        return None
    head = words[0].lower()
    clock = _TIME.fullmatch(words[1]) if len(words) > 1 else None
    if (cron := _at_clock(head, clock)) is not None:
        return cron, 2
    if (cron := _every_span(head)) is not None:
        return cron, 1
    if len(words) >= 5 and all(_CRON_FIELD.fullmatch(w) for w in words[:5]):
        return " ".join(words[:5]), 5
    return None


def parse_every(text: str, tz: str, now: datetime) -> tuple[When, str]:
    """A recurring time and the rest of the text (the task's options and goal)."""
    words = text.split()
    found = _recurrence(words)
    if found is None:
        raise UserInputError("schedule.bad_every", typed=" ".join(words[:5]))
    cron, used = found
    when = When(cron=cron, tz=zone(tz).key)
    try:
        when.check(now)
    except (ValueError, OverflowError) as exc:  # OverflowError: its next run is past year 9999
        raise UserInputError("schedule.bad_cron", cron=cron, error=str(exc)) from None
    return when, " ".join(words[used:])


def parse_at(text: str, tz: str, now: datetime) -> tuple[When, str]:
    """One moment (in the future) and the rest of the text."""
    words = text.split()
    local = zone(tz)
    here = now.astimezone(local)
    at: datetime | None = None
    used = 0
    first = words[0].lower() if words else ""
    second = words[1] if len(words) > 1 else ""
    if first == "in" and (span := _SPAN.fullmatch(second.lower())):
        at, used = now + timedelta(**{_UNITS[span[2]]: int(span[1])}), 2
    elif first.startswith("+") and (span := _SPAN.fullmatch(first)):
        at, used = now + timedelta(**{_UNITS[span[2]]: int(span[1])}), 1
    elif clock := _TIME.fullmatch(first):
        at = here.replace(hour=int(clock[1]), minute=int(clock[2]), second=0, microsecond=0)
        if at <= here:
            at += timedelta(days=1)
        used = 1
    elif first in _DAYS_AHEAD and (clock := _TIME.fullmatch(second)):
        at = (here + timedelta(days=_DAYS_AHEAD[first])).replace(
            hour=int(clock[1]), minute=int(clock[2]), second=0, microsecond=0
        )
        used = 2
    elif re.fullmatch(r"\d{4}-\d\d-\d\d", first) and _TIME.fullmatch(second):
        at, used = _local(f"{first}T{second}", local), 2
    elif re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d)?", first, re.IGNORECASE):
        at, used = _local(first.upper(), local), 1
    if at is None:
        raise _unread(words)
    _within_reach(at, now, local, " ".join(words[:used]))
    # stored and compared as UTC; shown in the owner's zone (``describe``)
    return When(at=at.astimezone(UTC), tz=local.key), " ".join(words[used:])


def _unread(words: list[str]) -> UserInputError:
    """Why these words are no time: a day that has passed, or the word (with its second when
    the first begins a two-word time) that is not one."""
    first = words[0].lower() if words else ""
    if first in _PAST_DAYS:
        return UserInputError("schedule.at_past_day", word=words[0])
    two = first in ("in", *_DAYS_AHEAD) or re.fullmatch(r"\d{4}-\d\d-\d\d", first)
    return UserInputError("schedule.bad_at", typed=" ".join(words[: 2 if two else 1]))


def _within_reach(at: datetime, now: datetime, local: ZoneInfo, typed: str) -> None:
    """UserInputError unless ``at`` is ahead of ``now`` by at most AT_HORIZON (judged before
    any conversion of zone: 9999-12-31 23:59 in UTC-12 is past the last moment Python has)."""
    if at <= now:
        raise UserInputError("schedule.in_past", at=at.astimezone(local).strftime("%Y-%m-%d %H:%M"))
    if at - now > AT_HORIZON:
        raise UserInputError("schedule.too_far", typed=typed, days=AT_HORIZON.days)


def _local(text: str, local: ZoneInfo) -> datetime:
    try:
        return datetime.fromisoformat(text).replace(tzinfo=local)
    except ValueError:
        raise UserInputError("schedule.bad_at", typed=text) from None


def describe(when: When) -> str:
    """``0 9 * * 1-5`` or ``2026-12-01 09:00``, as the owner reads it (their zone)."""
    if when.cron is not None:
        return when.cron
    assert when.at is not None
    return when.at.astimezone(zone(when.tz)).strftime("%Y-%m-%d %H:%M")
