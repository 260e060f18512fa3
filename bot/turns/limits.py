"""A turn that its engine's usage limit stopped: it goes back to the queue, its task waits
(and so does every task of that engine), and the owner gets one notice in their zone that
offers the engines that are not limited and hold the task's mode at least as strongly
(``bot.tasks.handover`` carries a task over)."""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import datetime, timedelta

from bot.models import Engine, Task, Turn
from bot.store import Store
from bot.store.db import utcnow
from bot.store.engine_state import LIMIT_HORIZON
from bot.telegram.notifier import Notifier
from bot.turns.outcome import local_time
from bot.turns.queue import TurnQueue
from executors.registry import may_move

log = logging.getLogger(__name__)
LIMIT_RETRY_MAX_S = 6 * 3600.0  # the longest wait between retries of a limit without a time


def retry_after_s(base_s: float, parks: int) -> float:
    """When to try again a usage limit that named no reset time, after ``parks`` earlier waits
    of the same turn: ``base_s`` (DETACH_LIMIT_RETRY_S), doubling each time, up to
    LIMIT_RETRY_MAX_S (or ``base_s`` when that is longer)."""
    return min(base_s * 2 ** min(parks, 16), max(base_s, LIMIT_RETRY_MAX_S))


def believed(until: datetime | None, now: datetime) -> datetime | None:
    """The reset time an engine named, if it can be one: None ("no reset time": the growing
    retry of DETACH_LIMIT_RETRY_S) when it is already past (stored, it would release every
    waiting task at once, each to meet the limit again) or further ahead than any plan's
    window (LIMIT_HORIZON: every task of the engine would wait behind it)."""
    if until is None or until <= now or until - now > LIMIT_HORIZON:
        return None
    return until


class Parking:
    def __init__(
        self,
        *,
        store: Store,
        queue: TurnQueue,
        notifier: Notifier,
        engines: Collection[Engine],
        retry_s: float,
        timezone: str,
    ) -> None:
        """``engines``: those a waiting task may be carried over to; ``retry_s``: the first
        wait of a limit without a reset time; ``timezone``: for owners who set no /tz."""
        self._store = store
        self._queue = queue
        self._notifier = notifier
        self._engines = engines
        self._retry_s = retry_s
        self._timezone = timezone

    async def park(
        self, task: Task, turn: Turn, until: datetime | None, runner: str | None = None
    ) -> None:
        """The turn goes back to the queue, unsubmitted, until ``until`` (None: the engine
        named no reset time: a growing wait), with the engine's limit, the notice and the
        acknowledgement's status in one transaction. A turn that waited before has its notice
        updated instead (no new buzz for each retry). The intake submits it again once the
        limit has reset. ``runner``: only while it holds the turn (``TurnTaken``)."""
        now = utcnow()
        named, until = until, believed(until, now)
        if named is not None and until is None:
            log.warning(
                "task %s: %s named a reset at %s: taken as none", task.id, task.engine, named
            )
        known = until is not None
        if until is None:
            until = now + timedelta(seconds=retry_after_s(self._retry_s, turn.limit_parks))
        zone = await self._store.users.tz(task.owner_id) or self._timezone
        key = "task.limit_parked" if known else "task.limit_parked_no_time"
        others = [
            engine
            for engine in sorted(self._engines)
            if engine != task.engine
            and may_move(task.approval_mode, task.engine, engine)
            and await self._queue.limited_until(engine) is None
        ]
        async with self._store.atomic():
            until = await self._queue.limit(task.engine, until)  # or the later one in force
            parked = await self._store.claims.park_turn(turn.id, runner)
            resets = local_time(until, zone)
            await self._notifier.limit_waits(
                parked, turn.id, key, resets, others, again=turn.limit_parks > 0
            )
            await self._notifier.ack_status(parked)
        log.info("task %s turn %s: waits for %s until %s", task.id, turn.id, task.engine, until)
