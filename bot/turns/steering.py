"""The inboxes of this process's running turns: a steer (a follow-up the owner sends into the
running turn instead of behind it) is put into its task's open inbox, which the turn's executor
reads (``bot.ports.SteerInbox``). An inbox lives exactly as long as its turn's agent: once it is
closed nothing more goes in, and what the executor never took is handed back (it runs as its own
next turn: its queued row was never removed). Nothing here survives a restart: after one a
steer is a queued follow-up, as it always was."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from bot.events import Steer

log = logging.getLogger(__name__)


class SteerBox:
    """One running turn's inbox (a ``SteerInbox``)."""

    def __init__(self, turn_id: int) -> None:
        self.turn_id = turn_id
        self._waiting: list[Steer] = []
        self._given: dict[int, str] = {}  # by steer id, put in once: a second tap puts nothing
        self._resolved: set[int] = set()  # the executor said what became of them
        self._arrived = asyncio.Event()
        self._closed = False

    def put(self, steer: Steer) -> bool:
        """False when the turn is over (its agent gone): the steer stays a queued turn."""
        if self._closed:
            return False
        if steer.steer_id not in self._given:
            self._given[steer.steer_id] = steer.text
            self._waiting.append(steer)
            self._arrived.set()
        return True

    def take(self) -> list[Steer]:
        waiting, self._waiting = self._waiting, []
        self._arrived.clear()
        return waiting

    async def arrived(self) -> None:
        await self._arrived.wait()

    def resolve(self, steer_id: int) -> bool:
        """The executor said what became of a steer; False when it was not one of this box's,
        or was said already (an event of a hostile or confused agent is not believed twice)."""
        fresh = steer_id in self._given and steer_id not in self._resolved
        self._resolved.add(steer_id)
        return fresh

    def close(self) -> list[int]:
        """No more steers; returns the ids of those the executor said nothing of (never taken,
        or taken and not reported): each runs as its own next turn."""
        self._closed = True
        self._waiting = []
        return sorted(set(self._given) - self._resolved)

    def text_of(self, steer_id: int) -> str:
        return self._given.get(steer_id, "")


class SteerBoard:
    """This process's open inboxes, by task id (one running turn per task)."""

    def __init__(self) -> None:
        self._boxes: dict[int, SteerBox] = {}

    @contextlib.contextmanager
    def open(self, task_id: int, turn_id: int) -> Iterator[SteerBox]:
        box = self._boxes[task_id] = SteerBox(turn_id)
        try:
            yield box
        finally:
            box.close()
            if self._boxes.get(task_id) is box:
                del self._boxes[task_id]

    def deliver(self, task_id: int, steer: Steer) -> bool:
        """Into the running turn of ``task_id`` here; False when none runs in this process."""
        box = self._boxes.get(task_id)
        # never into its own turn or a later one: the running turn ended and the follow-up
        # itself (or what came after it) started between the tap and this call
        delivered = box is not None and box.turn_id < steer.steer_id and box.put(steer)
        log.info("task %s: steer %s delivered=%s", task_id, steer.steer_id, delivered)
        return delivered

    def running_here(self, task_id: int) -> bool:
        return task_id in self._boxes
