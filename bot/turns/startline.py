"""The order in which this process's turns start their agents: the order they got their slots
(the queue's, oldest first). Turns that get slots together (two waiting tasks when a usage
limit resets) prepare side by side, but each starts its agent only once every turn ahead of
it has started its own or ended, or after ``START_ORDER_WAIT_S`` at most: a slow start (a
worktree being cut, a large repository's baseline) holds the turns behind it that long."""

from __future__ import annotations

import asyncio
import contextlib

START_ORDER_WAIT_S = 5.0


class StartLine:
    def __init__(self, wait_s: float = START_ORDER_WAIT_S) -> None:
        self._wait_s = wait_s
        self._ahead: dict[int, asyncio.Event] = {}  # turn id -> set once it left; slot order
        self._empty = asyncio.Event()  # set while no turn is on its way to its agent
        self._empty.set()

    def join(self, turn_id: int) -> None:
        """``turn_id`` got its slot: it starts after those that got theirs before."""
        self._ahead.setdefault(turn_id, asyncio.Event())
        self._empty.clear()

    def leave(self, turn_id: int) -> None:
        """``turn_id`` started its agent, or ended without one: those behind it may go."""
        left = self._ahead.pop(turn_id, None)
        if left is not None:
            left.set()
        if not self._ahead:
            self._empty.set()

    async def clear(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until no turn is between its slot and its agent's
        start: work that can come later (the outbox's next pass) lets them go first."""
        if self._empty.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._empty.wait()

    async def start(self, turn_id: int) -> None:
        """Wait (bounded) until every turn ahead of ``turn_id`` has left the line, then leave
        it: the caller starts its agent without awaiting anything more in between."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self._wait_s):
                for ahead in self._before(turn_id):
                    await ahead.wait()  # at once when it left meanwhile
        self.leave(turn_id)

    def _before(self, turn_id: int) -> list[asyncio.Event]:
        if turn_id not in self._ahead:
            return []  # run again after leaving (offered once more): nothing to keep
        ahead: list[asyncio.Event] = []
        for other, left in self._ahead.items():
            if other == turn_id:
                return ahead
            ahead.append(left)
        return ahead
