"""A new task's first baseline, read while the task is created (issue #54). Its first turn,
claimed at the creation, starts milliseconds later and read its baseline (``baseline.opening``:
the repository's configuration, top and status in one jail) only then, after the task's
transaction and the job's hop; read as soon as the task's directory is known, it is ready when
the turn starts. Either way it is read before any process of the agent exists.

Taken only by the turn it was read for, only for the same directory, and only when the read
began at most ``FRESH_S`` before (what the directory held as its turn started, not as it was
a while before); else it is read again. One not taken is dropped (its read stopped)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from bot.turns.baseline import Baseline, opening
from executors.gitguard import GitGuard
from executors.gitscope import Scope

FRESH_S = 2.0  # a read begun longer ago than this is read again
KEPT = 32  # reads kept at most (one per new task claimed here: a burst of them)
STOP_S = 5.0  # the bot's close waits this long at most for the reads it stops

Opened = tuple[Baseline, Scope | None]


@dataclass(frozen=True, slots=True)
class _Ahead:
    cwd: str
    began: float  # monotonic
    reading: asyncio.Future[Opened]


class Openings:
    """The first baselines read ahead in this process, by turn id."""

    def __init__(self, guard: GitGuard, fresh_s: float = FRESH_S) -> None:
        self._guard = guard
        self._fresh_s = fresh_s
        self._ahead: dict[int, _Ahead] = {}

    def start(self, turn_id: int, cwd: str) -> None:
        """Begin reading turn ``turn_id``'s baseline in ``cwd`` (its task's, as created)."""
        self._sweep()
        self.drop(turn_id)
        reading = asyncio.ensure_future(opening(self._guard, cwd))
        reading.add_done_callback(_retrieved)
        self._ahead[turn_id] = _Ahead(cwd, time.monotonic(), reading)

    def drop(self, turn_id: int) -> None:
        """Forget turn ``turn_id``'s read (its task was not created after all)."""
        if (ahead := self._ahead.pop(turn_id, None)) is not None:
            ahead.reading.cancel()

    async def open(self, turn_id: int, cwd: str) -> Opened:
        """``baseline.opening`` of ``cwd`` for turn ``turn_id``: the read begun for it at its
        task's creation when it is that one (same directory, fresh), else read now."""
        ahead = self._ahead.pop(turn_id, None)
        if ahead is not None:
            if (
                ahead.cwd == cwd
                and time.monotonic() - ahead.began <= self._fresh_s
                and not ahead.reading.cancelled()
            ):
                try:
                    return await ahead.reading
                except Exception:  # deliberate: it is read again, as if never read ahead
                    pass
            ahead.reading.cancel()
        return await opening(self._guard, cwd)

    async def aclose(self) -> None:
        """Stop the reads no turn took, waiting ``STOP_S`` at most (a jail whose creation was
        cancelled is not waited for: its bash ends when its stdin closes, with the bot)."""
        ahead, self._ahead = self._ahead, {}
        for each in ahead.values():
            each.reading.cancel()
        if ahead:
            await asyncio.wait([each.reading for each in ahead.values()], timeout=STOP_S)

    def _sweep(self) -> None:
        """Drop the reads no turn took in time (a claimed turn refused or parked at its start)."""
        now = time.monotonic()
        for turn_id in [t for t, a in self._ahead.items() if now - a.began > self._fresh_s]:
            self.drop(turn_id)
        while len(self._ahead) >= KEPT:
            self.drop(next(iter(self._ahead)))


def _retrieved(reading: asyncio.Future[Opened]) -> None:
    """A read ahead that ended in an error is only that: its turn, if it comes, reads again."""
    if not reading.cancelled():
        reading.exception()
