"""The loop that keeps a shared-database runner honest: every ``beat_s`` it renews this
process's lease; if it finds itself taken over it stops its own turns without a word (they
are another process's now) and starts a new incarnation; once its own renewals are steady it
takes over the turns of runners whose lease lapsed."""

from __future__ import annotations

import asyncio
import logging

from bot.fleet.lease import Lease
from bot.fleet.takeover import Takeover
from bot.store import Store
from bot.turns.pool import JobPool, StopReason

log = logging.getLogger(__name__)
FORGET_AFTER_S = 7 * 24 * 3600.0  # rows of runners gone that long (and holding no turn) go


class Fleet:
    def __init__(self, store: Store, lease: Lease, takeover: Takeover, pool: JobPool) -> None:
        self._store = store
        self._lease = lease
        self._takeover = takeover
        self._pool = pool

    async def run_forever(self) -> None:
        beats = 0
        while True:
            await asyncio.sleep(self._lease.beat_s)
            try:
                await self.beat()
                if beats % 720 == 0:
                    await self._store.runners.forget(FORGET_AFTER_S)
            except Exception:  # the database went away for a moment: the next beat retries
                log.exception("runner %s: heartbeat failed", self._lease.runner_id)
            beats += 1

    async def beat(self) -> None:
        if not await self._lease.renew():
            self._lease.lost()  # claims nothing until the new incarnation
            await self._pool.stop_all(StopReason.TAKEN_OVER)
            await self._lease.open()
            return
        if self._lease.steady:
            await self._takeover.sweep()

    async def recover_earlier(self) -> int:
        """At start: this runner's earlier incarnations (same name and host) are gone (what
        they left running was just stopped); their turns are taken over at once."""
        lease = self._lease
        taken = 0
        for runner_id in await self._store.runners.earlier(lease.name, lease.host, lease.runner_id):
            taken += len(await self._takeover.take(runner_id, dead=True))
        return taken
