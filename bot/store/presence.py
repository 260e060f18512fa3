"""What a runner's heartbeat announces of its host (issue #57): its engines (logged in, the
sandbox), its slots, its projects and the usage windows its engines reported there; stored as
JSON on its lease row for /hosts and the board, and as rows a claim can join (its engines with
the share of their plan left, its projects, its free slots, until when it counts as online)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from bot.models import Phrase
from bot.store.engine_windows import UsageWindow
from bot.store.schema import runner_engines, runner_projects, runners

ONLINE_BEATS = 2  # online while heard from within one heartbeat past the one it owes
BEATS_PER_LEASE = 6  # as bot.fleet.lease renews
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class EnginePresence:
    name: str
    available: bool  # installed and passed its probe (logged in where the CLI says so)
    line: Phrase | str  # its probe's line (version, login), said in the reader's language
    sandbox: bool  # mode=sandbox can run here


@dataclass(frozen=True, slots=True)
class Presence:
    """What a runner's heartbeat announces of its host (stored as JSON on its lease row)."""

    engines: tuple[EnginePresence, ...] = ()
    slots: int = 0  # how many turns it may run at once
    free: int = 0  # of which free now
    projects: tuple[tuple[str, str], ...] = ()  # name, path on this host
    windows: tuple[UsageWindow, ...] = ()  # its engines' plan windows as they reported here

    def encode(self) -> str:
        return json.dumps(
            {
                "engines": [[e.name, e.available, _line(e.line), e.sandbox] for e in self.engines],
                "slots": self.slots,
                "free": self.free,
                "projects": [list(p) for p in self.projects],
                "windows": [
                    [w.engine, w.window, w.used, _stamp(w.resets_at), _stamp(w.updated_at)]
                    for w in self.windows
                ],
            }
        )

    @classmethod
    def decode(cls, raw: str | None) -> Presence:
        """A row's presence; what an older version (or a broken row) wrote reads as none."""
        try:
            data = json.loads(raw or "{}")
            return cls(
                engines=tuple(
                    EnginePresence(
                        str(n),
                        bool(a),
                        Phrase.decode(line) if isinstance(line, dict) else str(line),
                        bool(sb),
                    )
                    for n, a, line, sb in data.get("engines", [])
                ),
                slots=int(data.get("slots", 0)),
                free=int(data.get("free", 0)),
                projects=tuple((str(n), str(p)) for n, p in data.get("projects", [])),
                windows=tuple(
                    UsageWindow(
                        str(e),
                        str(w),
                        None if u is None else float(u),
                        _read(r),
                        _read(at) or EPOCH,
                    )
                    for e, w, u, r, at in data.get("windows", [])
                ),
            )
        except (ValueError, TypeError, AttributeError, KeyError):
            return cls()

    def plan_left(self, engine: str, now: datetime) -> float:
        """The share of ``engine``'s plan left here (0..1): what its fullest window that has
        not reset leaves; 1 when none was reported (an engine reports a window only once it
        is well used)."""
        return plan_left(self.windows, engine, now)


def plan_left(windows: Iterable[UsageWindow], engine: str, now: datetime) -> float:
    used = [
        w.used
        for w in windows
        if w.engine == engine and w.used is not None and (w.resets_at is None or w.resets_at > now)
    ]
    return round(min(1.0, max(0.0, 1.0 - max(used, default=0.0))), 3)


def _line(line: Phrase | str) -> object:
    return line.encode() if isinstance(line, Phrase) else line


def _stamp(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _read(raw: object) -> datetime | None:
    return datetime.fromisoformat(str(raw)) if raw else None


async def announce(
    conn: AsyncConnection,
    runner_id: str,
    engines: Sequence[str],
    presence: Presence,
    lease_s: float,
    now: datetime,
) -> None:
    """Write what a heartbeat announces where a claim can join it (inside the beat's
    transaction, once its lease row was renewed)."""
    online_s = lease_s / BEATS_PER_LEASE * ONLINE_BEATS
    await conn.execute(
        runners.update()
        .where(runners.c.id == runner_id)
        .values(free=presence.free, online_until=now + timedelta(seconds=online_s))
    )
    for table in (runner_engines, runner_projects):
        await conn.execute(table.delete().where(table.c.runner == runner_id))
    if engines:
        rows = [
            {"runner": runner_id, "engine": e, "plan_left": presence.plan_left(e, now)}
            for e in dict.fromkeys(engines)
        ]
        await conn.execute(runner_engines.insert(), rows)
    if presence.projects:
        named = dict(presence.projects)
        rows = [{"runner": runner_id, "project": n, "path": p} for n, p in named.items()]
        await conn.execute(runner_projects.insert(), rows)


def orphans() -> list[sa.Delete]:
    """The deletes of what runners no longer on record announced."""
    known = sa.select(runners.c.id)
    return [t.delete().where(t.c.runner.not_in(known)) for t in (runner_engines, runner_projects)]
