"""What /hosts says of the hosts on a shared database: each host (``DETACH_HOST_NAME``; the
runners that run turns there, a front runs none) with whether it is online, since when, its
engines, its slots in use, its projects and the usage windows its engines reported there, as
their heartbeats announced them. A host is online while one of its runners is: not stopped or
taken over, and heard from within one heartbeat (plus its own beat's slack), so a change shows
within one heartbeat."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from bot.models import ProcessRole
from bot.store import EnginePresence, Runner, UsageWindow

BEATS_PER_LEASE = 6  # as bot.fleet.lease renews


@dataclass(frozen=True, slots=True)
class HostLine:
    host: str
    online: bool
    since: datetime  # online: since its oldest live runner started; offline: last heard from
    since_s: float  # seconds from ``since`` to when it was listed
    runners: tuple[str, ...]  # the names of its runners (bot, w1, …)
    engines: tuple[EnginePresence, ...]
    slots: int  # turns it may run at once (its live runners')
    running: int  # turns it runs now
    projects: tuple[tuple[str, str], ...]
    windows: tuple[UsageWindow, ...] = ()  # its engines' plan windows, as it announced them


def online(runner: Runner, now: datetime) -> bool:
    """Live and heard from within one heartbeat past the one it owes (its own lease says how
    often it beats)."""
    if runner.stopped_at is not None or runner.taken_at is not None:
        return False
    beat_s = (runner.expires_at - runner.heartbeat_at).total_seconds() / BEATS_PER_LEASE
    return (now - runner.heartbeat_at).total_seconds() <= 2 * beat_s


def host_lines(found: Sequence[Runner], now: datetime) -> list[HostLine]:
    """``found``: runners per host and name, newest first (``RunnerRepo.every``); the newest
    incarnation of each name counts, fronts are left out; online hosts first, then by name."""
    newest: dict[tuple[str, str], Runner] = {}
    for runner in found:
        if runner.role != ProcessRole.FRONT.value:
            newest.setdefault((runner.host, runner.name), runner)
    by_host: dict[str, list[Runner]] = {}
    for (host, _), runner in newest.items():
        by_host.setdefault(host, []).append(runner)
    lines = [_line(host, runners, now) for host, runners in by_host.items()]
    return sorted(lines, key=lambda line: (not line.online, line.host))


def _line(host: str, runners: list[Runner], now: datetime) -> HostLine:
    live = [r for r in runners if online(r, now)]
    shown = live or runners
    engines: dict[str, EnginePresence] = {}
    for runner in shown:
        for engine in runner.presence.engines:
            if engine.name not in engines or engine.available:
                engines[engine.name] = engine
    projects = dict(p for r in reversed(shown) for p in r.presence.projects)
    windows: dict[tuple[str, str], UsageWindow] = {}
    for w in sorted((w for r in shown for w in r.presence.windows), key=lambda w: w.updated_at):
        if w.resets_at is None or w.resets_at > now:
            windows[(w.engine, w.window)] = w  # the latest report of each window
    since = min(r.started_at for r in live) if live else max(r.heartbeat_at for r in runners)
    return HostLine(
        host=host,
        online=bool(live),
        since=since,
        since_s=max(0.0, (now - since).total_seconds()),
        runners=tuple(sorted(r.name for r in runners)),
        engines=tuple(engines[name] for name in sorted(engines)),
        slots=sum(r.presence.slots for r in live),
        running=sum(r.running for r in runners),
        projects=tuple(sorted(projects.items())),
        windows=tuple(windows[key] for key in sorted(windows)),
    )
