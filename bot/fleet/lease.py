"""This process's lease on a shared database: one row per incarnation (``name@host#xxxxxx``),
renewed by a heartbeat. A process that was cut off (paused, its database unreachable) learns
on its next renewal whether another took its turns over; it only takes over others once its
own heartbeats have been steady for a whole lease, so it never judges others by a gap it had
itself."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

from bot.store import Presence, Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OneProcess:
    """The runner of a single process (SQLite): no lease, one name."""

    runner_id: str


class Lease:
    def __init__(
        self,
        store: Store,
        *,
        name: str,
        host: str,
        role: str,
        lease_s: float,
        engines: Callable[[], Collection[str]],
        presence: Callable[[], Presence] | None = None,
    ) -> None:
        """``host``: this process's host name (DETACH_HOST_NAME); ``presence``: what each
        heartbeat announces of it (engines, slots, projects)."""
        self._store = store
        self.name, self.host, self.role = name, host, role
        self.lease_s = lease_s
        self._engines = engines
        self._presence = presence
        self.runner_id = ""
        self._renewed = float("-inf")  # monotonic time of the last renewal
        self._steady_since = float("inf")  # renewals have come without a gap since then

    @property
    def beat_s(self) -> float:
        """How often the lease is renewed: six renewals fit in a lease."""
        return self.lease_s / 6

    async def open(self) -> str:
        """A new incarnation (at start, and after this one was taken over)."""
        self.runner_id = f"{self.name}@{self.host}#{secrets.token_hex(3)}"
        await self._store.runners.register(
            self.runner_id, self.name, self.host, self.role, self.lease_s
        )
        if self._presence is not None:  # what it has, before its first heartbeat
            await self._store.runners.beat(
                self.runner_id, sorted(self._engines()), self.lease_s, self._presence()
            )
        self._mark_renewed()
        log.info("runner %s: lease of %ss", self.runner_id, self.lease_s)
        return self.runner_id

    def lost(self) -> None:
        """Another process took this incarnation's turns: no more claims under its name."""
        self.runner_id = ""

    async def renew(self) -> bool:
        """False when this incarnation was taken over (its turns are no longer its own)."""
        presence = self._presence() if self._presence is not None else None
        if not await self._store.runners.beat(
            self.runner_id, sorted(self._engines()), self.lease_s, presence
        ):
            log.warning("runner %s: taken over by another process", self.runner_id)
            return False
        self._mark_renewed()
        return True

    def _mark_renewed(self) -> None:
        now = time.monotonic()
        if now - self._renewed > self.lease_s / 2:  # a gap: steady only from now on
            self._steady_since = now
        self._renewed = now

    @property
    def steady(self) -> bool:
        """Renewed without a gap for a whole lease: others had the same chance to renew."""
        return time.monotonic() - self._steady_since >= self.lease_s

    async def close(self) -> None:
        """A clean stop: the lease lapses now, so another process takes over what is left."""
        if self.runner_id:
            await self._store.runners.stop(self.runner_id)
