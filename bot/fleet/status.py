"""What /status says of the runners on a shared database: each one's name, host, when it was
last heard from, how many turns it runs and its engines; a lapsed one is marked lost. And
what /hosts says of their hosts (``HostLine``, from bot.fleet.hosts)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.fleet.hosts import BEATS_PER_LEASE, HostLine, host_lines
from bot.store import EnginePresence, Runner, Store
from bot.store.db import utcnow

__all__ = ["EnginePresence", "FleetStatus", "HostLine", "RunnerLine"]

SEEN_WITHIN_LEASES = 4  # a runner gone longer than this many leases is no longer listed


@dataclass(frozen=True, slots=True)
class RunnerLine:
    runner: Runner
    seen_s: float  # seconds since its last heartbeat
    lost: bool  # its lease lapsed (or it stopped)


class FleetStatus:
    def __init__(self, store: Store, lease_s: float, shared: bool) -> None:
        self._store = store
        self._lease_s = lease_s
        self.shared = shared  # False: one process, nothing to list

    @property
    def beat_s(self) -> float:
        """How often runners renew their lease (and announce their presence)."""
        return self._lease_s / BEATS_PER_LEASE

    async def runners(self) -> list[RunnerLine]:
        if not self.shared:
            return []
        now = utcnow()
        found = await self._store.runners.listed(self._lease_s * SEEN_WITHIN_LEASES)
        return [RunnerLine(r, (now - r.heartbeat_at).total_seconds(), r.lapsed(now)) for r in found]

    async def hosts(self) -> list[HostLine]:
        """/hosts: every host on record, online or not (none in one process), with the usage
        windows its engines reported there (each host its own plan)."""
        if not self.shared:
            return []
        return host_lines(await self._store.runners.every(), utcnow())
