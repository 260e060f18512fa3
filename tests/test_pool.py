"""The job pool: cap, parallel tasks, timeout, cancel, shutdown, a takeover's hands-off stop."""

from __future__ import annotations

import asyncio
import time

from bot.turns.pool import Claimed, JobPool, StopReason, TurnControl


class Recorder:
    def __init__(self, sleep_s: float, claim_s: float = 0.0) -> None:
        self.sleep_s = sleep_s
        self.claim_s = claim_s
        self.finished: set[int] = set()
        self.started: dict[int, float] = {}
        self.stopped: dict[int, StopReason | None] = {}
        self.t0 = time.monotonic()

    async def __call__(self, turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        self.started[turn_id] = time.monotonic() - self.t0
        await asyncio.sleep(self.claim_s)  # claiming the turn's row: not stoppable yet
        try:
            with control.running():
                await asyncio.sleep(self.sleep_s)
            self.finished.add(turn_id)
        except asyncio.CancelledError:
            await asyncio.sleep(0.2)  # final writes after a stop must not be cut short
            self.stopped[turn_id] = control.reason
            raise


async def _until(predicate, timeout_s: float = 10) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_cap_is_honoured_and_tasks_run_in_parallel():
    recorder = Recorder(1.0)
    async with JobPool("t1", 2, 60).serve(recorder) as pool:
        for n in (1, 2, 3):
            await pool.submit(task_id=n, turn_id=n)
        await _until(lambda: len(recorder.started) == 3)
    first, second = sorted(recorder.started[n] for n in (1, 2))
    assert second - first < 0.6, recorder.started  # two tasks in parallel
    assert recorder.started[3] - first >= 0.9, recorder.started  # the third waits for a slot


async def test_timeout_stops_the_turn_with_a_reason():
    recorder = Recorder(30)
    async with JobPool("t2", 2, 0.5).serve(recorder) as pool:
        await pool.submit(task_id=7, turn_id=70)
        await _until(lambda: 70 in recorder.stopped)
        assert not pool.is_running(7)
    assert recorder.stopped[70] is StopReason.TIMED_OUT


async def test_cancel_by_task_id():
    recorder = Recorder(30)
    async with JobPool("t3", 2, 60).serve(recorder) as pool:
        assert pool.cancel(5) is False  # nothing runs for task 5
        await pool.submit(task_id=5, turn_id=50)
        await _until(lambda: pool.is_running(5))
        assert pool.cancel(5) is True
        await _until(lambda: 50 in recorder.stopped)
        # the pool keeps working after a cancel
        await pool.submit(task_id=6, turn_id=60)
        await _until(lambda: 60 in recorder.started)
    assert recorder.stopped[50] is StopReason.CANCELLED


async def test_shutdown_lets_running_turns_finish_their_final_writes():
    recorder = Recorder(30)
    async with JobPool("t4", 2, 60).serve(recorder) as pool:
        await pool.submit(task_id=8, turn_id=80)
        await _until(lambda: pool.is_running(8))
    assert recorder.stopped[80] is StopReason.SHUTDOWN


async def test_a_stop_while_starting_applies_when_the_agent_would_start():
    recorder = Recorder(30, claim_s=0.5)
    async with JobPool("t5", 2, 60).serve(recorder) as pool:
        await pool.submit(task_id=9, turn_id=90)
        await _until(lambda: 90 in recorder.started)
        assert pool.cancel(9) is True
        await _until(lambda: 90 in recorder.stopped)
    assert recorder.stopped[90] is StopReason.CANCELLED


async def test_a_stop_after_the_agent_ended_is_refused():
    recorder = Recorder(0.0)
    finishing = asyncio.Event()
    release = asyncio.Event()

    async def handler(turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        with control.running():
            pass
        finishing.set()
        await release.wait()  # writing the outcome, sending the card

    async with JobPool("t6", 2, 60).serve(handler) as pool:
        await pool.submit(task_id=4, turn_id=40)
        await asyncio.wait_for(finishing.wait(), 10)
        assert pool.cancel(4) is False  # too late: the outcome is being written
        release.set()
        await _until(lambda: not pool.is_running(4))
    assert recorder.stopped == {}


async def test_a_turn_submitted_again_while_it_runs_is_offered_once_more_after():
    """A usage limit sends a turn back to the queue while its agent still exits; a job for it
    then (the switch to another engine, the limit's reset) must not run beside the first, nor
    be lost: the first job offers the turn once more when its run ends, once."""
    runs: list[tuple[int, float]] = []
    release = asyncio.Event()

    async def handler(turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        runs.append((turn_id, time.monotonic()))
        if len(runs) == 1:
            await release.wait()

    async with JobPool("t7", 2, 60).serve(handler) as pool:
        await pool.submit(task_id=3, turn_id=30)
        await _until(lambda: len(runs) == 1)
        await pool.submit(task_id=3, turn_id=30)
        await pool.submit(task_id=3, turn_id=30)  # twice: still one more run
        await asyncio.sleep(0.5)
        assert len(runs) == 1  # never beside the running one
        release.set()
        await _until(lambda: len(runs) == 2)
        await asyncio.sleep(0.3)
    assert [turn for turn, _ in runs] == [30, 30]


async def test_a_takeover_stops_every_turn_even_while_it_writes_its_outcome():
    """Another process took this runner's turns: each stops at once, in whatever phase,
    with the reason that tells it to write nothing."""
    reasons: dict[int, StopReason | None] = {}
    finishing = asyncio.Event()

    async def handler(turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        try:
            if turn_id == 1:
                with control.running():
                    pass
                finishing.set()
                await asyncio.sleep(30)  # writing the outcome
            with control.running():
                await asyncio.sleep(30)  # the agent runs
        except asyncio.CancelledError:
            reasons[turn_id] = control.reason
            raise

    async with JobPool("t8", 4, 60).serve(handler) as pool:
        await pool.submit(task_id=1, turn_id=1)
        await asyncio.wait_for(finishing.wait(), 10)
        await pool.submit(task_id=2, turn_id=2)
        await _until(lambda: pool.running_turns() == [1, 2])
        assert pool.free_slots == 2
        await pool.stop_all(StopReason.TAKEN_OVER)
        assert pool.running_turns() == []
    assert reasons == {1: StopReason.TAKEN_OVER, 2: StopReason.TAKEN_OVER}


async def test_a_turn_claimed_by_its_creator_starts_at_once_or_first_when_a_slot_frees():
    """``start``: a turn whose row is already claimed runs at once while a slot is free; when
    the cap is reached meanwhile it waits ahead of the plain queue, and the cap still holds."""
    from types import SimpleNamespace

    def claimed(n: int) -> Claimed:
        return (SimpleNamespace(id=n), SimpleNamespace(id=n * 10))  # type: ignore[return-value]

    recorder = Recorder(0.5)
    running: list[int] = []
    seen_claims: dict[int, bool] = {}

    async def handler(turn_id: int, control: TurnControl, claim: Claimed | None) -> None:
        seen_claims[turn_id] = claim is not None
        running.append(turn_id)
        assert len(running) <= 1, running  # never over the cap
        try:
            await recorder(turn_id, control, claim)
        finally:
            running.remove(turn_id)

    async with JobPool("t9", 1, 60).serve(handler) as pool:
        pool.start(claimed(1))  # a free slot: at once
        assert pool.free_slots == 0  # its job exists: it holds the slot
        await _until(lambda: 10 in recorder.started)
        await pool.submit(task_id=2, turn_id=20)  # plain, waits
        pool.start(claimed(3))  # claimed while the slot was taken: waits, ahead of turn 20
        await _until(lambda: len(recorder.finished) == 3)
    assert sorted(recorder.started, key=recorder.started.__getitem__) == [10, 30, 20]
    assert seen_claims == {10: True, 30: True, 20: False}  # a claimed row is not claimed again


async def test_turns_that_get_slots_together_start_their_agents_in_that_order():
    """Three turns get their slots at once; the first prepares longest, the last shortest:
    their agents start 1, 2, 3 all the same (a usage limit's reset releases waiting tasks
    together: they go on oldest first)."""
    prepare_s = {1: 0.3, 2: 0.15, 3: 0.0}
    started: list[int] = []

    async def handler(turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        await asyncio.sleep(prepare_s[turn_id])  # its spec, its baseline, its notices
        with control.running():
            await control.starting()
            started.append(turn_id)  # the agent starts: nothing awaited in between
            await asyncio.sleep(0.1)

    async with JobPool("t10", 3, 60).serve(handler) as pool:
        for n in (1, 2, 3):
            await pool.submit(task_id=n, turn_id=n)
        await _until(lambda: len(started) == 3)
    assert started == [1, 2, 3]


async def test_a_turn_that_never_starts_holds_those_behind_it_for_the_bound_only():
    """The first turn's start hangs (a stuck worktree cut): the second starts its agent after
    the start line's bound; one that ends without an agent (parked) frees the line at once."""
    from bot.turns.startline import StartLine

    line = StartLine(wait_s=0.3)
    for turn_id in (1, 2, 3):
        line.join(turn_id)
    t0 = time.monotonic()
    await line.start(2)  # turn 1 never starts
    assert 0.25 < time.monotonic() - t0 < 2, time.monotonic() - t0
    line.leave(1)  # it ended without an agent
    t0 = time.monotonic()
    await line.start(3)
    await line.start(4)  # never joined (run again after leaving): goes at once
    assert time.monotonic() - t0 < 0.1


async def test_the_outbox_lets_starting_turns_reach_their_agents_first_for_the_bound_only():
    """``agents_started`` (what the outbox's pass awaits) returns once every turn holding a
    slot has started its agent or ended; a turn that never gets there holds it for the bound
    only; with no turn starting, at once."""
    go = {1: asyncio.Event(), 3: asyncio.Event()}  # turn 3's is never set
    agents: list[int] = []

    async def handler(turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        if turn_id in go:
            await go[turn_id].wait()  # its baseline, its spec: still on its way
        with control.running():
            await control.starting()
            agents.append(turn_id)
            await asyncio.sleep(10 if turn_id == 2 else 0.05)

    async with JobPool("t11", 3, 60).serve(handler) as pool:
        t0 = time.monotonic()
        await pool.agents_started(timeout_s=5)
        assert time.monotonic() - t0 < 0.1  # nothing starting
        await pool.submit(task_id=1, turn_id=1)
        waiting = asyncio.ensure_future(pool.agents_started(timeout_s=5))
        await asyncio.sleep(0.2)
        assert not waiting.done() and agents == []
        go[1].set()
        await asyncio.wait_for(waiting, 2)
        assert agents == [1]
        await pool.submit(task_id=2, turn_id=2)  # runs on: its agent started, nothing held
        await _until(lambda: agents == [1, 2])
        t0 = time.monotonic()
        await pool.agents_started(timeout_s=5)
        assert time.monotonic() - t0 < 0.1
        await pool.submit(task_id=3, turn_id=3)  # stuck before its agent: the bound
        t0 = time.monotonic()
        await pool.agents_started(timeout_s=0.3)
        assert 0.25 < time.monotonic() - t0 < 2
        pool.cancel(2)
        pool.cancel(3)  # applies as it would start its agent
        go[3].set()
