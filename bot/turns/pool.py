"""The job pool: this process's turns under a concurrency cap, each under its timeout, any of
them stoppable by task id, and the reason a turn was stopped handed to the turn handler.

Each turn runs as a job of the process's APScheduler (``bot.turns.scheduler``, in memory), of
its task ``turn``, whose ``max_running_jobs`` is the cap. APScheduler's ``add_job`` names a job
by a fresh UUID (4.0.0a6 takes no id, and ``ConflictPolicy`` applies to schedules only), so the
pool keeps the map turn id -> job: a turn offered while its job exists gets no second job (it
is offered once more when that job ends). The pool hands APScheduler a turn when a slot is
free, in its own order (a turn already claimed first), and counts the slot taken from that
moment, so ``free_slots`` is exact for whoever claims from the shared queue.

Where turns come from is not the pool's business: in one process ``submit`` puts them in a
local FIFO (the app's tables are the record; queued turns are re-submitted from them at start);
with scale-out workers on PostgreSQL every runner claims submitted turns from the app's tables
(``bot.fleet.dispatch``) and ``start``s them here, and ``submit`` only wakes the runners
(``announce``). A turn claims its row before it starts, so a turn offered twice runs once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Self
from uuid import UUID

from bot.models import Task, Turn
from bot.turns.scheduler import JobScheduler
from bot.turns.startline import StartLine

log = logging.getLogger(__name__)
DRAIN_TIMEOUT_S = 20.0
TURN_TASK = "turn"  # the turns' APScheduler task
HANDOVER_WAIT_S = 1.0  # how long long polling waits for a turn's job to start
# how long the outbox's next pass waits for the turns starting here to spawn their agents (its
# sends, reads and HTTP would take the loop from them: a new task's acknowledgement goes a few
# ms later, its agent starts that much sooner)
AGENTS_FIRST_S = 0.1


class StopReason(StrEnum):
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    SHUTDOWN = "shutdown"  # the turn is left for recovery at the next start
    TAKEN_OVER = "taken_over"  # this runner's lease lapsed and another took the turn: hands off


class Phase(StrEnum):
    STARTING = "starting"  # claiming its row: a stop is remembered, applied on entering RUNNING
    RUNNING = "running"  # the agent runs: a stop cancels it at once
    FINISHING = "finishing"  # writing the outcome: too late to stop


@dataclass(slots=True)
class TurnControl:
    """Handed to the turn handler: why it was stopped, and which part of it may be stopped."""

    task_id: int
    turn_id: int
    reason: StopReason | None = None
    phase: Phase = Phase.STARTING
    _job: asyncio.Task[None] | None = field(default=None, repr=False)
    _line: StartLine | None = field(default=None, repr=False)

    def request_stop(self, reason: StopReason) -> bool:
        if self.phase is Phase.FINISHING and reason is not StopReason.TAKEN_OVER:
            return False
        self.reason = self.reason or reason
        if self.phase is not Phase.STARTING and self._job is not None:
            self._job.cancel()
        return True

    async def starting(self) -> None:
        """Wait (bounded) until the turns that got their slots before this one have started
        their agents (``bot.turns.startline``); the caller starts its agent next, awaiting
        nothing in between."""
        if self._line is not None:
            await self._line.start(self.turn_id)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The stoppable part of a turn; a stop requested while starting applies here."""
        if self.reason is not None:
            raise asyncio.CancelledError
        self.phase = Phase.RUNNING
        try:
            yield
        finally:
            self.phase = Phase.FINISHING


Claimed = tuple[Task, Turn]
# the turn handler: a turn to claim (by id), or one already claimed from the shared queue
TurnHandler = Callable[[int, TurnControl, Claimed | None], Awaitable[None]]


@dataclass(slots=True, eq=False)
class _Slot:
    """A turn holding one of the pool's slots, from its hand-over to APScheduler until its job
    ends."""

    task_id: int
    turn_id: int
    claimed: Claimed | None
    job_id: UUID | None = None  # APScheduler's, once added
    job: asyncio.Task[object] | None = None  # the task running the job, once it runs
    started: bool = False  # its job started (or will never: released before)


class JobPool:
    def __init__(
        self,
        identity: str,
        max_concurrent: int,
        timeout_s: float,
        announce: Callable[[], Awaitable[None]] | None = None,
        scheduler: JobScheduler | None = None,
    ) -> None:
        """``announce``: turns are claimed from a shared database; submitting one wakes the
        runners (None: one process, the local FIFO). ``scheduler``: the process's, entered
        before the pool and left after it (None: the pool has one of its own). Call ``serve``
        before entering."""
        self.identity = identity
        self._max_concurrent = max_concurrent
        self._timeout_s = timeout_s
        self._announce = announce
        self._own_scheduler = scheduler is None
        self._scheduler = scheduler or JobScheduler()
        self._handler: TurnHandler | None = None
        self._running: dict[int, TurnControl] = {}  # by turn id: one registration per turn
        self._again: set[int] = set()  # turns offered again while their job existed
        # one process: turns waiting for a slot (with their row when already claimed)
        self._waiting: deque[tuple[int, int, Claimed | None]] = deque()
        self._slots: dict[int, _Slot] = {}  # by turn id: at most the cap, one job per turn
        self._handing: deque[_Slot] = deque()  # slots taken, their jobs not added yet
        self._handed = asyncio.Event()
        self._unstarted = 0  # turns handed over whose jobs have not started
        self._all_started = asyncio.Event()
        self._all_started.set()
        self._feeder: asyncio.Task[None] | None = None
        self._line = StartLine()  # turns start their agents in the order they got slots
        self._closed = False
        self.wake = asyncio.Event()  # a turn was submitted here, or a slot came free

    def serve(self, on_turn: TurnHandler) -> Self:
        self._handler = on_turn
        return self

    async def __aenter__(self) -> Self:
        assert self._handler is not None, "serve() names the handler before the pool starts"
        if self._own_scheduler:
            await self._scheduler.__aenter__()
        self._feeder = asyncio.create_task(self._feed(), name=f"pool {self.identity}")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        # still queued in the app's tables: submitted again at start (a claimed one: interrupted)
        self._closed = True
        self._waiting.clear()
        await self.stop_all(StopReason.SHUTDOWN)
        if self._feeder is not None:
            self._feeder.cancel()
            await asyncio.wait({self._feeder})
        if self._own_scheduler:
            await self._scheduler.__aexit__(*exc_info)

    async def stop_all(self, reason: StopReason) -> None:
        """Stop every turn of this process, one plain cancel each, and wait (bounded) for them
        to write what their stop says they may."""
        for control in list(self._running.values()):
            control.request_stop(reason)
        deadline = asyncio.get_running_loop().time() + DRAIN_TIMEOUT_S
        while self._running and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.05)
        if self._running:
            log.warning("turns %s did not stop within %ss", sorted(self._running), DRAIN_TIMEOUT_S)
        if reason is StopReason.SHUTDOWN:
            # only a turn that did not stop within the drain
            jobs = {slot.job for slot in self._slots.values() if slot.job is not None}
            for job in jobs:
                job.cancel()
            if jobs:
                await asyncio.wait(jobs, timeout=DRAIN_TIMEOUT_S)

    @property
    def free_slots(self) -> int:
        return self._max_concurrent - len(self._slots)

    async def submit(self, task_id: int, turn_id: int) -> None:
        if self._announce is not None:
            await self._announce()
            self.wake.set()
        else:
            self._waiting.append((task_id, turn_id, None))
            self._start_waiting()
        log.info("task %s turn %s submitted", task_id, turn_id)

    @property
    def local(self) -> bool:
        """One process: this pool is the only runner of the app's turns."""
        return self._announce is None

    def start(self, claimed: Claimed) -> None:
        """Run a turn already claimed (from the shared queue, or by its creator): at once when a
        slot is free (the caller saw one), else first when one comes free; never over the cap."""
        task, turn = claimed
        self._waiting.appendleft((task.id, turn.id, claimed))
        self._start_waiting()

    def _start_waiting(self) -> None:
        """Hand waiting turns to APScheduler, oldest first, while the cap allows. A turn whose
        job exists gets none: its job offers it once more when it ends."""
        while self._waiting and self.free_slots > 0 and not self._closed:
            task_id, turn_id, claimed = self._waiting.popleft()
            if (held := self._slots.get(turn_id)) is not None:
                self._again.add(turn_id)
                log.info(
                    "task %s turn %s: has a job (%s); offered again after it",
                    task_id,
                    turn_id,
                    held.job_id or "being added",
                )
                continue
            slot = self._slots[turn_id] = _Slot(task_id, turn_id, claimed)
            self._line.join(turn_id)
            self._handing.append(slot)
            self._handed.set()
            self._unstarted += 1
            self._all_started.clear()

    async def agents_started(self, timeout_s: float = AGENTS_FIRST_S) -> None:
        """Wait (at most ``timeout_s``) until every turn holding a slot here has started its
        agent or ended (``StartLine.clear``)."""
        await self._line.clear(timeout_s)

    async def handed_over(self, timeout_s: float = HANDOVER_WAIT_S) -> None:
        """Wait (at most ``timeout_s``) until every turn handed to APScheduler so far has
        started its job: the job has taken its first step (the agent spawned, or its claim
        under way). Long polling waits for it, so an update's turn does not start behind the
        next ``getUpdates``."""
        if self._all_started.is_set():
            return  # at once: not one pass of the loop more (``wait_for`` would take some)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_started.wait(), timeout_s)

    def _job_started(self, slot: _Slot) -> None:
        if not slot.started:
            slot.started = True
            self._unstarted -= 1
            if self._unstarted == 0:
                self._all_started.set()

    async def _feed(self) -> None:
        """Add the jobs of the slots taken, in their order (``add_job`` is a coroutine, taking
        a slot is not); APScheduler starts with the first."""
        configured = False
        while True:
            await self._handed.wait()
            self._handed.clear()
            while self._handing:
                slot = self._handing[0]
                try:
                    scheduler = await self._scheduler.started()
                    if not configured:
                        await scheduler.configure_task(
                            TURN_TASK, func=self._job, max_running_jobs=self._max_concurrent
                        )
                        configured = True
                    # no result kept (expiration 0): a turn's outcome is in the app's tables
                    slot.job_id = await scheduler.add_job(TURN_TASK, kwargs={"slot": slot})
                except Exception:  # the turn stays queued in the app's tables: say it, go on
                    log.exception("task %s turn %s: no job added", slot.task_id, slot.turn_id)
                    self._release(slot)
                finally:
                    self._handing.popleft()

    async def _job(self, slot: _Slot) -> None:
        """APScheduler's job of one turn. A failing turn never kills the pool (nor APScheduler,
        which would log it under the job's UUID only): said here, with the turn's ids."""
        slot.job = asyncio.current_task()
        self._job_started(slot)
        try:
            if not self._closed:
                await self.run(slot.task_id, slot.turn_id, slot.claimed)
        except Exception:
            log.exception("task %s turn %s: the turn's job failed", slot.task_id, slot.turn_id)
        finally:
            self._release(slot)

    def _release(self, slot: _Slot) -> None:
        self._job_started(slot)  # a job that was never added never starts
        if self._slots.get(slot.turn_id) is slot:
            del self._slots[slot.turn_id]
            self._line.leave(slot.turn_id)  # ended, or never got to start its agent
        self._start_waiting()
        self.wake.set()

    def is_running(self, task_id: int) -> bool:
        return any(c.task_id == task_id for c in self._running.values())

    def running_turns(self) -> list[int]:
        return sorted(self._running)

    def cancel(self, task_id: int, reason: StopReason = StopReason.CANCELLED) -> bool:
        """Stop the turns of ``task_id`` running in this process; False if none runs here."""
        stopped = [
            c.request_stop(reason) for c in list(self._running.values()) if c.task_id == task_id
        ]
        return any(stopped)

    async def run(self, task_id: int, turn_id: int, claimed: Claimed | None = None) -> None:
        """Run one turn under its timeout (the body of its job), then once more if it was
        offered again meanwhile (submitted twice, or again after that run sent it back to the
        queue: a usage limit), so the timeout and /cancel keep holding the turn that runs; the
        handler's claim does nothing if the turn is no longer queued."""
        while True:
            await self._run_once(task_id, turn_id, claimed)
            if turn_id not in self._again or self._closed:  # closed: queued in the tables
                return
            self._again.discard(turn_id)
            claimed = None  # offered again: claimed anew (or not) by id

    async def _run_once(self, task_id: int, turn_id: int, claimed: Claimed | None) -> None:
        control = TurnControl(task_id, turn_id, _job=asyncio.current_task(), _line=self._line)
        self._running[turn_id] = control
        timer = asyncio.get_running_loop().call_later(
            self._timeout_s, control.request_stop, StopReason.TIMED_OUT
        )
        handler = self._handler
        assert handler is not None, "serve() named no turn handler"
        try:
            await handler(turn_id, control, claimed)
        except asyncio.CancelledError:
            if control.reason is None:
                raise  # the pool itself is going away
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        finally:
            timer.cancel()
            del self._running[turn_id]
