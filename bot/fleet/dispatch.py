"""Claiming turns from the shared database: while this runner has a free slot it claims the oldest
submitted turn that fits it (an engine it has, pinned to its host or none, a project it has;
``ClaimRepo.claim_next``: ``SKIP LOCKED``, so each turn goes to one runner) and starts it in its
pool. It looks when PostgreSQL says a turn was submitted (``LISTEN``), when one of its own turns
ends, and every ``poll_s`` whatever happens (a notification lost while the listening connection
was down costs at most that)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from bot.fleet.lease import Lease
from bot.store import Store
from bot.store.claim_queries import TURNS_CHANNEL
from bot.turns.pool import JobPool

log = logging.getLogger(__name__)
POLL_S = 2.0
RECONNECT_S = 2.0
KEEPALIVE_S = 15.0


class Dispatcher:
    def __init__(
        self,
        store: Store,
        pool: JobPool,
        lease: Lease,
        *,
        engines: Callable[[], Collection[str]],
        listen_dsn: str | None,
        projects: Mapping[str, str] | None = None,
        poll_s: float = POLL_S,
        prefer_s: float = 0.0,
    ) -> None:
        """``listen_dsn``: a plain PostgreSQL DSN for the LISTEN connection (None: poll);
        ``projects``: this host's (name to directory): it claims turns of those only;
        ``prefer_s``: how long a submitted turn is left to a better host that fits it
        (DETACH_HOST_PREFERENCE_S)."""
        self._prefer_s = prefer_s
        self._store = store
        self._pool = pool
        self._lease = lease
        self._engines = engines
        self._dsn = listen_dsn
        self._poll_s = poll_s
        self._projects = dict(projects or {})

    async def run_forever(self) -> None:
        listener = asyncio.create_task(self._listen(), name="listen") if self._dsn else None
        try:
            while True:
                self._pool.wake.clear()  # before the pass: a turn submitted during it wakes us
                try:
                    await self.claim_while_free()
                except Exception:  # the database went away for a moment: the next pass retries
                    log.exception("claiming turns failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._pool.wake.wait(), self._poll_s)
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await listener

    async def claim_while_free(self) -> int:
        """Claim and start turns while a slot is free; returns how many started."""
        started = 0
        while self._pool.free_slots > 0:
            engines = self._engines()
            if not engines or not self._lease.runner_id:
                break
            claimed = await self._store.claims.claim_next(
                self._lease.runner_id,
                engines,
                self._lease.host,
                self._projects,
                prefer_s=self._prefer_s,
            )
            if claimed is None:
                break
            self._pool.start(claimed)
            started += 1
        return started

    async def _listen(self) -> None:
        import asyncpg  # scale-out only (the `postgres` extra)

        def woken(*_: Any) -> None:
            self._pool.wake.set()

        while True:
            try:
                conn = await asyncpg.connect(self._dsn, timeout=10)
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.warning("LISTEN connection failed (%s); polling every %ss", exc, self._poll_s)
                await asyncio.sleep(RECONNECT_S)
                continue
            try:
                await conn.add_listener(TURNS_CHANNEL, woken)
                self._pool.wake.set()  # anything submitted while we were not listening
                while True:
                    await asyncio.sleep(KEEPALIVE_S)
                    await conn.execute("SELECT 1")  # notices a dropped connection
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.warning("LISTEN connection lost (%s); reconnecting", exc)
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.shield(conn.close(timeout=2))
            await asyncio.sleep(RECONNECT_S)
