"""The runners' leases: every process that runs turns on a shared database (the bot, scale-out
workers) has one row per incarnation, renewed by its heartbeat. A runner whose heartbeat is
older than the lease (or that stopped) has lapsed; the first live process to mark it taken
takes its turns over, and a runner that comes back finds itself taken and stops its turns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa

from bot.models import ProcessRole, TaskStatus
from bot.store.db import Clock, Database, aware, utc
from bot.store.presence import EnginePresence, Presence, announce, orphans
from bot.store.schema import runners, turns

__all__ = ["EnginePresence", "Presence", "Runner", "RunnerRepo"]


@dataclass(frozen=True, slots=True)
class Runner:
    id: str  # name@host#incarnation, the value of turns.runner
    name: str
    host: str
    role: str
    engines: tuple[str, ...]
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    stopped_at: datetime | None = None
    taken_at: datetime | None = None
    running: int = 0  # turns it runs now (as the database says)
    presence: Presence = field(default_factory=Presence)

    def lapsed(self, now: datetime) -> bool:
        return self.stopped_at is not None or self.taken_at is not None or self.expires_at < now


def _runner(row: sa.Row) -> Runner:  # type: ignore[type-arg]
    m = row._mapping
    return Runner(
        id=m["id"],
        name=m["name"],
        host=m["host"],
        role=m["role"],
        engines=tuple(e for e in m["engines"].split(",") if e),
        started_at=utc(m["started_at"]),
        heartbeat_at=utc(m["heartbeat_at"]),
        expires_at=utc(m["expires_at"]),
        stopped_at=aware(m["stopped_at"]),
        taken_at=aware(m["taken_at"]),
        running=int(m.get("running") or 0),
        presence=Presence.decode(m.get("presence")),
    )


def _lapsed(now: datetime) -> sa.ColumnElement[bool]:
    return sa.or_(
        runners.c.taken_at.is_not(None),
        runners.c.stopped_at.is_not(None),
        runners.c.expires_at < now,
    )


class RunnerRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def register(
        self, runner_id: str, name: str, host: str, role: str, lease_s: float
    ) -> None:
        now = self._clock()
        async with self._engine.begin() as conn:
            await conn.execute(
                runners.insert().values(
                    id=runner_id,
                    name=name,
                    host=host,
                    role=role,
                    started_at=now,
                    heartbeat_at=now,
                    expires_at=now + timedelta(seconds=lease_s),
                )
            )

    async def beat(
        self,
        runner_id: str,
        engines: Sequence[str],
        lease_s: float,
        presence: Presence | None = None,
    ) -> bool:
        """Renew the lease for ``lease_s`` (announcing ``presence``, when given); False when it
        was taken over (this incarnation is over)."""
        shown = {} if presence is None else {"presence": presence.encode()}
        now = self._clock()
        async with self._engine.begin() as conn:
            result = await conn.execute(
                runners.update()
                .where(
                    runners.c.id == runner_id,
                    runners.c.taken_at.is_(None),
                    runners.c.stopped_at.is_(None),
                )
                .values(
                    heartbeat_at=now,
                    expires_at=now + timedelta(seconds=lease_s),
                    engines=",".join(engines),
                    **shown,
                )
            )
            if result.rowcount == 1 and presence is not None:
                await announce(conn, runner_id, engines, presence, lease_s, now)
        return result.rowcount == 1

    async def stop(self, runner_id: str) -> None:
        """A clean stop: the lease lapses at once (its turns are taken over without waiting)."""
        async with self._engine.begin() as conn:
            await conn.execute(
                runners.update().where(runners.c.id == runner_id).values(stopped_at=self._clock())
            )

    async def get(self, runner_id: str) -> Runner | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(runners.select().where(runners.c.id == runner_id))).first()
        return _runner(row) if row else None

    async def take(self, runner_id: str, dead: bool = False) -> bool:
        """Mark a runner taken (inside the takeover's transaction) if its lease lapsed (or it
        is known to be ``dead``); True when it is taken now or was before, or has no row (an
        older version's turns); False while it is alive. Concurrent takers may both get True:
        the conditional update of each turn decides which one takes it."""
        now = self._clock()
        async with self._engine.begin() as conn:
            result = await conn.execute(
                runners.update()
                .where(runners.c.id == runner_id, sa.true() if dead else _lapsed(now))
                .values(taken_at=sa.func.coalesce(runners.c.taken_at, now))
            )
            if result.rowcount == 1:
                return True
            exists = await conn.execute(sa.select(runners.c.id).where(runners.c.id == runner_id))
            return exists.first() is None

    async def lapsed_with_turns(self) -> list[str]:
        """Runners that run turns (as the database says) and whose lease lapsed, or that have
        no lease at all."""
        query = (
            sa.select(turns.c.runner)
            .select_from(turns.outerjoin(runners, runners.c.id == turns.c.runner))
            .where(
                turns.c.status == TaskStatus.RUNNING.value,
                turns.c.runner.is_not(None),
                sa.or_(runners.c.id.is_(None), _lapsed(self._clock())),
            )
            .distinct()
        )
        async with self._engine.connect() as conn:
            return [r[0] for r in await conn.execute(query)]

    async def earlier(self, name: str, host: str, runner_id: str) -> list[str]:
        """This runner's earlier incarnations (same name and host) that were not taken over."""
        query = sa.select(runners.c.id).where(
            runners.c.name == name,
            runners.c.host == host,
            runners.c.id != runner_id,
            runners.c.taken_at.is_(None),
        )
        async with self._engine.connect() as conn:
            return [r[0] for r in await conn.execute(query)]

    async def listed(self, seen_within_s: float) -> list[Runner]:
        """Runners seen within ``seen_within_s`` and not stopped, or still holding turns; with
        how many turns each runs; newest first per name."""
        cutoff = self._clock() - timedelta(seconds=seen_within_s)
        running = (
            sa.select(sa.func.count())
            .where(turns.c.runner == runners.c.id, turns.c.status == TaskStatus.RUNNING.value)
            .scalar_subquery()
        )
        query = (
            sa.select(runners, running.label("running"))
            .where(
                sa.or_(
                    sa.and_(runners.c.heartbeat_at >= cutoff, runners.c.stopped_at.is_(None)),
                    running > 0,
                )
            )
            .order_by(runners.c.name, runners.c.started_at.desc())
        )
        async with self._engine.connect() as conn:
            return [_runner(r) for r in await conn.execute(query)]

    async def every(self) -> list[Runner]:
        """Every runner still on record (gone ones are forgotten after a while), stopped or
        not, with how many turns each runs; per host and name, newest first."""
        running = (
            sa.select(sa.func.count())
            .where(turns.c.runner == runners.c.id, turns.c.status == TaskStatus.RUNNING.value)
            .scalar_subquery()
        )
        query = sa.select(runners, running.label("running")).order_by(
            runners.c.host, runners.c.name, runners.c.started_at.desc()
        )
        async with self._engine.connect() as conn:
            return [_runner(r) for r in await conn.execute(query)]

    async def hosts_known(self) -> int:
        """How many hosts have runners that run turns on record (a front runs none); a card
        names its host only when there is more than one."""
        query = sa.select(sa.func.count(sa.distinct(runners.c.host))).where(
            runners.c.role != ProcessRole.FRONT.value
        )
        async with self._engine.connect() as conn:
            return int((await conn.execute(query)).scalar() or 0)

    async def forget(self, older_than_s: float) -> int:
        """Drop rows of runners gone for a long time that hold no turns (keeps the table small)."""
        cutoff = self._clock() - timedelta(seconds=older_than_s)
        holding = sa.select(turns.c.id).where(
            turns.c.runner == runners.c.id, turns.c.status == TaskStatus.RUNNING.value
        )
        async with self._engine.begin() as conn:
            result = await conn.execute(
                runners.delete().where(runners.c.heartbeat_at < cutoff, ~sa.exists(holding))
            )
            for delete in orphans():
                await conn.execute(delete)
        return int(result.rowcount)
