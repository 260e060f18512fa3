"""Retention: the running bot's periodic clean-up, so the database does not grow without bound.

Each pass drops the bytes of delivered files (nothing reads them again), deletes delivered
outbox rows, the transcripts of archived tasks, voice drafts and closed preflight holds older
than ``DETACH_RETENTION_DAYS``, and drops files held unanswered past their bound
(``bot.telegram.held``). The work is bounded:
batches of ``batch`` rows, each its own short transaction, a pause between them (SQLite has one
writer, which the bot's other writes wait for: measured by ``bench/retention.py``), at most
``max_batches`` per kind per pass; what is left waits for the next pass."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from bot.store import Store
from bot.store.db import Clock, utcnow
from bot.telegram.held import HeldFiles

log = logging.getLogger(__name__)
EVERY_S = 3600.0  # between passes
FIRST_AFTER_S = 60.0  # the first pass: after the start's own work
BATCH = 200  # rows of a few hundred bytes: a few ms
FILE_BATCH = 20  # files: each row rewritten holds up to 27 MB of base64 (20 MB sent)
MAX_BATCHES = 25  # per kind and pass: at most 5,000 rows of each
PAUSE_S = 0.05  # between batches: the loop answers Telegram meanwhile


@dataclass(frozen=True, slots=True)
class Pruned:
    files: int = 0  # delivered files whose bytes were dropped
    outbox: int = 0  # delivered outbox rows deleted
    transcript: int = 0  # transcript lines of archived tasks deleted
    held: int = 0  # held files unanswered past their bound
    drafts: int = 0  # voice drafts older than the retention (tapped or not)
    holds: int = 0  # closed preflight holds (their task started or was cancelled)


class Retention:
    def __init__(
        self,
        store: Store,
        days: float,
        *,
        held: HeldFiles | None = None,
        clock: Clock = utcnow,
        batch: int = BATCH,
        max_batches: int = MAX_BATCHES,
    ) -> None:
        """``days``: how long delivered rows and archived transcripts are kept (0: forever)."""
        self._store = store
        self._days = days
        self._held = held
        self._clock = clock
        self._batch = batch
        self._max_batches = max_batches

    async def prune_once(self) -> Pruned:
        """One bounded pass; what it removed."""
        repo = self._store.retention
        files = await self._batches(repo.strip_delivered_files, min(self._batch, FILE_BATCH))
        outbox = transcript = drafts = holds = 0
        if self._days > 0:
            before: datetime = self._clock() - timedelta(days=self._days)
            outbox = await self._batches(lambda n: repo.delete_delivered(before, n), self._batch)
            transcript = await self._batches(
                lambda n: repo.delete_archived_transcripts(before, n), self._batch
            )
            drafts = await self._batches(
                lambda n: self._store.drafts.delete_before(before, n), self._batch
            )
            holds = await self._batches(lambda n: repo.delete_closed_holds(before, n), self._batch)
        held = self._held.prune() if self._held is not None else 0
        pruned = Pruned(files, outbox, transcript, held, drafts, holds)
        if pruned != Pruned():
            log.info("retention pruned %s", pruned)
        return pruned

    async def _batches(self, step: Callable[[int], Awaitable[int]], size: int) -> int:
        total = 0
        for _ in range(self._max_batches):
            done = await step(size)
            total += done
            if done < size:
                break
            await asyncio.sleep(PAUSE_S)
        return total

    async def run_forever(
        self, every_s: float = EVERY_S, first_after_s: float = FIRST_AFTER_S
    ) -> None:
        """A pass every ``every_s``, the first ``first_after_s`` after the start."""
        await asyncio.sleep(first_after_s)
        while True:
            try:
                await self.prune_once()
            except Exception:  # deliberate: a failed pass is tried again at the next one
                log.exception("retention pass failed")
            await asyncio.sleep(every_s)
