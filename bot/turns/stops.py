"""Stops from elsewhere: on a shared database a /cancel handled by another process (the bot,
when a turn runs on a worker) arrives as a flag on the turn's row, and a runner cut off past its
lease finds its turn claimed by another; a running turn looks for both every ``poll_s`` and is
stopped (cancelled, or handed off). In a single process nothing is watched: the pool cancels."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from bot.store import Store
from bot.turns.pool import StopReason, TurnControl

log = logging.getLogger(__name__)


class RemoteStops:
    def __init__(self, store: Store, poll_s: float | None) -> None:
        """``poll_s``: how often a running turn looks; None: never (a single process)."""
        self._store = store
        self._poll_s = poll_s

    @contextlib.contextmanager
    def watching(self, turn_id: int, runner: str | None, control: TurnControl) -> Iterator[None]:
        """Looked for while inside (the agent runs); the watcher ends on exit."""
        if self._poll_s is None:
            yield
            return
        watcher = asyncio.create_task(self._watch(turn_id, runner, control, self._poll_s))
        try:
            yield
        finally:
            watcher.cancel()

    async def _watch(
        self, turn_id: int, runner: str | None, control: TurnControl, every_s: float
    ) -> None:
        """A /cancel handled elsewhere, or another process that took the turn over (this
        runner was cut off past its lease): the turn stops, the second time hands off."""
        while True:
            await asyncio.sleep(every_s)
            if runner is not None and not await self._store.claims.holds(turn_id, runner):
                log.warning("turn %s: taken over by another process; stopping it", turn_id)
                control.request_stop(StopReason.TAKEN_OVER)
                return
            if await self._store.claims.stop_requested(turn_id):
                log.info("turn %s: stop requested from another process", turn_id)
                control.request_stop(StopReason.CANCELLED)
                return
