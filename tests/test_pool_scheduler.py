"""The job pool runs each turn as a job of the process's APScheduler: its task ``turn`` holds the
cap, a turn offered twice has one job, a stopped or failing turn leaves APScheduler running the
next ones and keeps no result, and the schedules fire from the same scheduler."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest
from apscheduler import JobLookupError, RunState, current_job

from bot.schedules.timer import ScheduleTimer, When
from bot.turns.pool import TURN_TASK, Claimed, JobPool, StopReason, TurnControl
from bot.turns.scheduler import JobScheduler


async def _until(predicate, timeout_s: float = 10) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_each_turn_is_a_job_of_the_task_whose_max_running_jobs_is_the_cap():
    jobs: dict[int, UUID] = {}
    release = asyncio.Event()

    async def handler(turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        job = current_job.get()
        assert job.task_id == TURN_TASK
        jobs[turn_id] = job.id
        await release.wait()

    async with JobScheduler() as scheduler:
        async with JobPool("s1", 3, 60, scheduler=scheduler).serve(handler) as pool:
            for n in (1, 2, 3, 4):
                await pool.submit(task_id=n, turn_id=n)
            await _until(lambda: len(jobs) == 3)
            aps = await scheduler.started()
            tasks = {task.id: task for task in await aps.get_tasks()}
            assert tasks[TURN_TASK].max_running_jobs == 3
            assert tasks[TURN_TASK].running_jobs == 3
            assert len(await aps.get_jobs()) == 3  # the fourth waits for a slot, no job yet
            release.set()
            await _until(lambda: len(jobs) == 4)
            await _until(lambda: pool.free_slots == 3)
            assert len(set(jobs.values())) == 4  # one job each
            # no job's result is kept in memory
            for job_id in jobs.values():
                with pytest.raises(JobLookupError):
                    await aps.get_job_result(job_id, wait=False)


async def test_a_turn_offered_while_its_job_exists_gets_no_second_job():
    runs: list[UUID] = []
    release = asyncio.Event()

    async def handler(turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        runs.append(current_job.get().id)
        await release.wait()

    async with JobScheduler() as scheduler:
        async with JobPool("s2", 4, 60, scheduler=scheduler).serve(handler) as pool:
            for _ in range(3):
                await pool.submit(task_id=5, turn_id=50)
            await _until(lambda: len(runs) == 1)
            aps = await scheduler.started()
            assert len(await aps.get_jobs()) == 1
            assert pool.free_slots == 3
            release.set()
            await _until(lambda: len(runs) == 2 and pool.free_slots == 4)
    assert runs[0] == runs[1]  # offered again: once more, in the same job


async def test_stopped_and_failing_turns_leave_the_scheduler_running_the_next(caplog):
    stopped: dict[int, StopReason | None] = {}
    finished: list[int] = []

    async def handler(turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        if turn_id == 3:
            raise RuntimeError("the turn broke")
        try:
            with control.running():
                await asyncio.sleep(0 if turn_id >= 10 else 30)
        except asyncio.CancelledError:
            stopped[turn_id] = control.reason
            raise
        finished.append(turn_id)

    caplog.set_level(logging.ERROR, logger="bot.turns.pool")
    async with JobScheduler() as scheduler:
        async with JobPool("s3", 2, 0.5, scheduler=scheduler).serve(handler) as pool:
            await pool.submit(task_id=1, turn_id=1)  # cancelled
            await pool.submit(task_id=2, turn_id=2)  # over its timeout
            await _until(lambda: pool.running_turns() == [1, 2])
            assert pool.cancel(1)
            await _until(lambda: len(stopped) == 2)
            await pool.submit(task_id=3, turn_id=3)  # fails
            await _until(lambda: pool.free_slots == 2)
            for n in (10, 11, 12):
                await pool.submit(task_id=n, turn_id=n)
            await _until(lambda: len(finished) == 3)
            aps = await scheduler.started()
            assert aps.state is RunState.started
    assert stopped == {1: StopReason.CANCELLED, 2: StopReason.TIMED_OUT}
    assert "task 3 turn 3: the turn's job failed" in caplog.text


async def test_the_schedules_fire_from_the_scheduler_that_runs_the_turns():
    fired = asyncio.Event()

    async def on_fire(schedule_id: int) -> None:
        assert schedule_id == 7
        fired.set()

    async def handler(turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        pass

    async with JobScheduler() as scheduler:
        async with JobPool("s4", 2, 60, scheduler=scheduler).serve(handler) as pool:
            async with ScheduleTimer(scheduler).serve(on_fire) as timer:
                await pool.submit(task_id=1, turn_id=1)
                await timer.set(7, When(at=datetime.now(UTC) + timedelta(seconds=0.2)))
                await asyncio.wait_for(fired.wait(), 10)
                aps = await scheduler.started()
                assert {task.id for task in await aps.get_tasks()} == {
                    TURN_TASK,
                    "detach-schedule",
                }


async def test_handed_over_returns_once_the_handed_turns_started_their_jobs():
    """What long polling waits for before the next getUpdates: the jobs of the turns an update
    handed over have taken their first step."""
    started: list[int] = []

    async def handler(turn_id: int, control: TurnControl, claimed: Claimed | None) -> None:
        started.append(turn_id)
        await asyncio.sleep(0.2)

    async with JobScheduler() as scheduler:
        await scheduler.start()
        async with JobPool("s5", 2, 60, scheduler=scheduler).serve(handler) as pool:
            await pool.handed_over()  # nothing handed over: at once
            await pool.submit(task_id=1, turn_id=1)
            await pool.submit(task_id=2, turn_id=2)
            await pool.submit(task_id=3, turn_id=3)  # waits for a slot: not handed over
            assert started == []
            await pool.handed_over()
            assert started == [1, 2]
