"""The job pool on a real SQLite job store: cap, parallel tasks, timeout, cancel."""

from __future__ import annotations

import asyncio
import time

from bot.pool import JobPool, StopReason, TurnControl


class Recorder:
    def __init__(self, sleep_s: float) -> None:
        self.sleep_s = sleep_s
        self.started: dict[int, float] = {}
        self.stopped: dict[int, StopReason | None] = {}
        self.t0 = time.monotonic()

    async def __call__(self, turn_id: int, control: TurnControl) -> None:
        self.started[turn_id] = time.monotonic() - self.t0
        try:
            await asyncio.sleep(self.sleep_s)
        except asyncio.CancelledError:
            self.stopped[turn_id] = control.reason
            raise


async def _until(predicate, timeout_s: float = 10) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_cap_is_honoured_and_tasks_run_in_parallel(tmp_path):
    recorder = Recorder(1.0)
    async with JobPool(f"sqlite+aiosqlite:///{tmp_path}/jobs.sqlite", "t1", 2, 60,
                       recorder) as pool:
        for n in (1, 2, 3):
            await pool.submit(task_id=n, turn_id=n)
        await _until(lambda: len(recorder.started) == 3)
    first_two = sorted(recorder.started[n] for n in (1, 2))
    assert first_two[1] < 0.6, recorder.started  # two tasks in parallel
    assert recorder.started[3] >= 0.9, recorder.started  # the third waits for a free slot


async def test_timeout_stops_the_turn_with_a_reason(tmp_path):
    recorder = Recorder(30)
    async with JobPool(f"sqlite+aiosqlite:///{tmp_path}/jobs.sqlite", "t2", 2, 0.5,
                       recorder) as pool:
        await pool.submit(task_id=7, turn_id=70)
        await _until(lambda: 70 in recorder.stopped)
        assert not pool.is_running(7)
    assert recorder.stopped[70] is StopReason.TIMED_OUT


async def test_cancel_by_task_id(tmp_path):
    recorder = Recorder(30)
    async with JobPool(f"sqlite+aiosqlite:///{tmp_path}/jobs.sqlite", "t3", 2, 60,
                       recorder) as pool:
        assert pool.cancel(5) is False  # nothing runs for task 5
        await pool.submit(task_id=5, turn_id=50)
        await _until(lambda: pool.is_running(5))
        assert pool.cancel(5) is True
        await _until(lambda: 50 in recorder.stopped)
        # the pool keeps working after a cancel
        await pool.submit(task_id=6, turn_id=60)
        await _until(lambda: 60 in recorder.started)
    assert recorder.stopped[50] is StopReason.CANCELLED
