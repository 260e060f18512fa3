"""One turn per task at a time: submit a task's oldest queued turn when none of its turns runs,
and none of an engine whose usage limit is reached (until it resets)."""

from __future__ import annotations

import logging
import time
from datetime import datetime

from bot.store import Store
from bot.store.claim_queries import ClaimedBy
from bot.store.db import utcnow
from bot.turns.pool import Claimed, JobPool

log = logging.getLogger(__name__)
LIMITS_REFRESH_S = 2.0  # how stale this process's copy of the engines' limits may be


class TurnQueue:
    def __init__(self, store: Store, pool: JobPool) -> None:
        self._store = store
        self._pool = pool
        self._limits: dict[str, datetime] = {}
        self._limits_read = float("-inf")
        self._held: dict[int, float] = {}  # turn id -> when its hold ends (monotonic)
        self._created_running: set[int] = set()  # turns claimed at creation, not started yet

    async def kick(self, task_id: int, now: datetime | None = None) -> None:
        """Submit the next turn of ``task_id`` if it may start now. Idempotent: whoever asks
        (the command, the intake's periodic kick, a finished turn), one job per turn; marking
        the row submitted is the atomic gate, and the pool ignores a job of a turn it runs.
        A turn of a limited engine stays queued; the intake's periodic kick submits it once the
        limit has reset. ``now``: the moment the limits are judged at (one for a whole pass)."""
        turn = await self._store.claims.next_queued_turn(task_id)
        if turn is None or self._holds(turn.id):
            return
        if await self._any_limit():
            task = await self._store.tasks.get(task_id)
            if task is not None and await self.limited_until(task.engine, now) is not None:
                return
        if not await self._store.claims.mark_submitted(turn.id):
            return
        await self._pool.submit(task_id, turn.id)

    def hold(self, turn_id: int, hold_s: float) -> None:
        """Keep the queued, unsubmitted ``turn_id`` from being submitted here for ``hold_s``
        seconds (a routed task's grace: unsubmitted, no runner may claim it). In memory only,
        and it lapses by itself: after a restart the intake submits the turn at once, and a
        hold nobody releases never strands it."""
        self._held[turn_id] = time.monotonic() + hold_s

    async def release(self, task_id: int, turn_id: int) -> None:
        """The hold of ``turn_id`` ends: it is submitted now (as ``kick`` would)."""
        self._held.pop(turn_id, None)
        await self.kick(task_id)

    def _holds(self, turn_id: int) -> bool:
        ends = self._held.get(turn_id)
        if ends is not None and time.monotonic() >= ends:
            del self._held[turn_id]
            ends = None
        return ends is not None

    async def submit(self, task_id: int, turn_id: int) -> None:
        """Submit a turn its creator marked submitted (a new task's first: nothing to wait for)."""
        await self._pool.submit(task_id, turn_id)

    def claim_here(self) -> ClaimedBy | None:
        """One process with a slot free: a new task's first turn is inserted claimed (the task
        created running: no claim's UPDATEs, one commit and several hops fewer before its agent
        starts); hand it to ``start`` once that committed. None: submit it as usual."""
        if not self._pool.local or self._pool.free_slots <= 0:
            return None
        return ClaimedBy(self._pool.identity)

    def start(self, claimed: Claimed) -> None:
        """Run a turn ``claim_here`` claimed (its transaction committed)."""
        self._created_running.add(claimed[1].id)
        self._pool.start(claimed)

    def created_running(self, turn_id: int) -> bool:
        """Whether ``turn_id`` is a new task's first turn, claimed at its creation and not
        started yet (asked once, as it starts): nothing about the task was said but its
        acknowledgement, so there is no follow-up or limit notice to tell it started."""
        if turn_id not in self._created_running:
            return False
        self._created_running.discard(turn_id)
        return True

    def stop(self, task_id: int) -> bool:
        """Stop the turn of ``task_id`` running in this process (a stop asked for elsewhere)."""
        return self._pool.cancel(task_id)

    async def kick_unsubmitted(self) -> int:
        """Submit queued turns that nobody has submitted yet (added by `detach add`, left queued
        by a restart, or waiting for an engine's limit), the longest waiting first."""
        task_ids = await self._store.claims.unsubmitted_task_ids()
        if task_ids:
            await self._refresh(force=True)  # the limits as they are; no re-read in the pass
        now = utcnow()  # one moment for the pass: a reset falling inside it keeps the order
        for task_id in task_ids:
            await self.kick(task_id, now)
        return len(task_ids)

    # -- engines' usage limits --------------------------------------------------------------
    async def limited_until(self, engine: str, now: datetime | None = None) -> datetime | None:
        """When ``engine``'s usage limit resets, while it is reached (at ``now``); else None."""
        await self._refresh()
        until = self._limits.get(engine)
        return until if until is not None and until > (now or utcnow()) else None

    async def limit(self, engine: str, until: datetime) -> datetime:
        """``engine`` is limited until ``until``, or until the limit in force when that is later
        (never shortened by one task's answer): recorded for every process, seen here at once.
        Returns the limit in force."""
        until = await self._store.limits.extend(engine, until)
        self._limits[engine] = until
        log.info("%s: usage limit until %s", engine, until.isoformat())
        return until

    async def _any_limit(self) -> bool:
        await self._refresh()
        return bool(self._limits)

    async def _refresh(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._limits_read < LIMITS_REFRESH_S:
            return
        self._limits = await self._store.limits.active()
        self._limits_read = time.monotonic()
