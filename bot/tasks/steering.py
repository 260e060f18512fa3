"""Steering: a follow-up sent while its task's turn runs offers Steer now / Queue. Steer puts
it into the running turn's inbox (``bot.turns.steering``), whose executor takes it in or, when
the turn ends first, leaves it to run as its own next turn: its queued row stays until the
running turn's drive says it was taken in, and is removed then (``TurnDrive``), so it runs
once. Untapped for ``choice_s`` (DETACH_REPLY_CHOICE_S), the follow-up does what
DETACH_REPLY_DEFAULT says. The timers are this desk's tasks, cancelled when it closes; after a
restart an untapped follow-up is a queued one.

A turn that runs in another process (a scale-out worker) cannot be steered from here: the
follow-up stays queued, and the tap says so. A process that runs no turn (`detach mcp`) asks
for a steer with a flag on the queued turn (``SteerRequests``), which the bot's intake carries
out here (``carry_asked``)."""

from __future__ import annotations

import asyncio
import functools
import logging
from enum import StrEnum

from bot.errors import TaskNotFound
from bot.events import Steer
from bot.models import Task, TaskStatus, Turn
from bot.store import Store
from bot.telegram.callbacks import SteerChoice
from bot.telegram.notifier import Notifier
from bot.turns.steering import SteerBoard

log = logging.getLogger(__name__)


class SteerAnswer(StrEnum):
    """What a tap (or the timer) came to; its toast is ``toast.steer_<value>``."""

    SENT = "sent"  # in the running turn's inbox
    NEXT = "next"  # no turn runs any more: it is the next turn
    ELSEWHERE = "elsewhere"  # the turn runs in another process: it stays queued
    QUEUED = "queued"  # Queue chosen
    GONE = "gone"  # it no longer waits (ran, or was cancelled)
    ASKED = "asked"  # asked of the bot, which steers it (from `detach mcp`)


class SteerDesk:
    def __init__(
        self,
        store: Store,
        board: SteerBoard,
        notifier: Notifier,
        *,
        default: str,
        choice_s: float,
        local: bool,
    ) -> None:
        """``local``: this process runs every turn (no scale-out workers)."""
        self._local = local
        self._store = store
        self._board = board
        self._notifier = notifier
        self._default = SteerChoice(default)
        self._choice_s = choice_s
        self._timers: dict[int, asyncio.Task[None]] = {}  # by follow-up turn id

    def may_steer(self, task: Task) -> bool:
        """A follow-up of ``task`` is offered Steer now: its turn runs (here or elsewhere)."""
        return task.status is TaskStatus.RUNNING or self._board.running_here(task.id)

    def offered(self, owner_id: int, turn_id: int) -> None:
        """Start the follow-up's timer: untapped, it does the default."""
        timer = asyncio.create_task(self._after(owner_id, turn_id), name=f"steer {turn_id}")
        self._timers[turn_id] = timer
        timer.add_done_callback(functools.partial(self._timer_done, turn_id))

    def _timer_done(self, turn_id: int, timer: asyncio.Task[None]) -> None:
        self._timers.pop(turn_id, None)
        if not timer.cancelled() and (exc := timer.exception()) is not None:
            log.error("follow-up turn %s: its default choice failed", turn_id, exc_info=exc)

    async def _after(self, owner_id: int, turn_id: int) -> None:
        await asyncio.sleep(self._choice_s)
        self._timers.pop(turn_id, None)  # deciding now: not cancelled by its own choice
        answer = await self.choose(owner_id, turn_id, self._default)  # a failure: still queued
        log.info("follow-up turn %s: untapped, %s -> %s", turn_id, self._default, answer)

    async def choose(self, user_id: int, turn_id: int, choice: SteerChoice) -> SteerAnswer:
        """The owner's tap (or the default): somebody else's follow-up is a missing one (and
        leaves the owner's default timer running)."""
        turn = await self._store.tasks.get_turn(turn_id)
        task = await self._store.tasks.get(turn.task_id) if turn is not None else None
        if task is None or task.owner_id != user_id:
            raise TaskNotFound(f"turn {turn_id}")
        assert turn is not None
        timer = self._timers.pop(turn_id, None)
        if timer is not None and timer is not asyncio.current_task():
            timer.cancel()
        if turn.status is not TaskStatus.QUEUED:
            return SteerAnswer.GONE
        if choice is SteerChoice.QUEUE:
            await self._notifier.steer_note(task, turn_id, "steer.queued", final=False)
            return SteerAnswer.QUEUED
        return await self._steer(task, turn)

    async def _steer(self, task: Task, turn: Turn) -> SteerAnswer:
        """Said on the acknowledgement before it goes in: the drive's note of what became of
        it comes after this one, never under it."""
        waits = await self._store.questions.pending_count(task.id) > 0
        key = "steer.after_approval" if waits else "steer.sending"
        await self._notifier.steer_note(task, turn.id, key, final=False)
        if self._board.deliver(task.id, Steer(turn.id, turn.prompt)):
            return SteerAnswer.SENT
        if not self._local and task.status is TaskStatus.RUNNING:  # another process runs it
            await self._notifier.steer_note(task, turn.id, "steer.queued", final=False)
            return SteerAnswer.ELSEWHERE
        await self._notifier.steer_note(task, turn.id, "steer.deferred", final=False)
        return SteerAnswer.NEXT

    async def carry_asked(self) -> None:
        """Steer the follow-ups another process asked to (each once; one gone meanwhile is
        left as it is)."""
        for turn_id in await self._store.claims.take_steers():
            turn = await self._store.tasks.get_turn(turn_id)
            task = await self._store.tasks.get(turn.task_id) if turn is not None else None
            if task is not None:
                answer = await self.choose(task.owner_id, turn_id, SteerChoice.STEER)
                log.info("follow-up turn %s: steer asked from outside -> %s", turn_id, answer)

    async def aclose(self) -> None:
        timers = list(self._timers.values())
        for timer in timers:
            timer.cancel()
        if timers:
            await asyncio.wait(timers, timeout=5)


class SteerRequests:
    """Steering where no turn runs (`detach mcp`): Steer now is a flag on the queued turn that
    the bot carries out (``SteerDesk.carry_asked``); Queue is said on the acknowledgement.
    Nothing is offered: the client chose."""

    def __init__(self, store: Store, notifier: Notifier) -> None:
        self._store = store
        self._notifier = notifier

    def may_steer(self, task: Task) -> bool:
        return task.status is TaskStatus.RUNNING

    def offered(self, owner_id: int, turn_id: int) -> None:
        """Never offered here (the client's choice comes with its follow-up)."""

    async def choose(self, user_id: int, turn_id: int, choice: SteerChoice) -> SteerAnswer:
        turn = await self._store.tasks.get_turn(turn_id)
        task = await self._store.tasks.get(turn.task_id) if turn is not None else None
        if task is None or task.owner_id != user_id:
            raise TaskNotFound(f"turn {turn_id}")
        if choice is SteerChoice.QUEUE:
            await self._notifier.steer_note(task, turn_id, "steer.queued", final=False)
            return SteerAnswer.QUEUED
        asked = await self._store.claims.request_steer(turn_id)
        return SteerAnswer.ASKED if asked else SteerAnswer.GONE
