"""The queue of turns in the app's tables: which turn of a task may go next, submitting it
once, the atomic claim that starts it, a usage limit sending it back, and stops asked for by
another process."""

from __future__ import annotations

import sqlalchemy as sa

from bot.models import Task, TaskStatus, Turn
from bot.store.db import Clock, Database
from bot.store.schema import tasks, turns
from bot.store.task_rows import task_of, turn_of


class ClaimRepo:
    """Reads and writes of ``turns`` (and their task's status) that move a turn through the
    queue; what a turn holds and how it ends is ``TaskRepo``'s."""

    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def next_queued_turn(self, task_id: int) -> Turn | None:
        """The oldest queued turn of a task, if no turn of it is running."""
        running = sa.select(turns.c.id).where(
            turns.c.task_id == task_id, turns.c.status == TaskStatus.RUNNING.value
        )
        query = (
            turns.select()
            .where(
                turns.c.task_id == task_id,
                turns.c.status == TaskStatus.QUEUED.value,
                ~sa.exists(running),
            )
            .order_by(turns.c.seq)
            .limit(1)
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(query)).first()
        return turn_of(row) if row else None

    async def mark_submitted(self, turn_id: int) -> bool:
        """Mark a queued turn submitted; False when somebody already did (submit it once)."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                turns.update()
                .where(
                    turns.c.id == turn_id,
                    turns.c.submitted_at.is_(None),
                    turns.c.status == TaskStatus.QUEUED.value,
                )
                .values(submitted_at=self._clock())
            )
        return result.rowcount == 1

    async def unsubmit_queued(self) -> None:
        """After a restart the job engine's queue is not trusted: queued turns are re-submitted."""
        async with self._engine.begin() as conn:
            await conn.execute(
                turns.update()
                .where(turns.c.status == TaskStatus.QUEUED.value)
                .values(submitted_at=None)
            )

    async def unsubmitted_task_ids(self) -> list[int]:
        """Tasks with a queued turn nobody submitted, the one waiting longest first."""
        query = (
            sa.select(turns.c.task_id)
            .where(turns.c.status == TaskStatus.QUEUED.value, turns.c.submitted_at.is_(None))
            .group_by(turns.c.task_id)
            .order_by(sa.func.min(turns.c.id))
        )
        async with self._engine.connect() as conn:
            return [r[0] for r in await conn.execute(query)]

    async def park_turn(self, turn_id: int) -> Task:
        """A turn its engine's usage limit stopped goes back to the queue, unsubmitted (it is
        submitted again once the limit has reset), and its task waits for the limit."""
        now = self._clock()
        async with self._engine.begin() as conn:
            parked = await conn.execute(
                turns.update()
                .where(turns.c.id == turn_id)
                .values(
                    status=TaskStatus.QUEUED.value,
                    submitted_at=None,
                    started_at=None,
                    runner=None,
                    stop_requested=False,
                    parked_at=sa.func.coalesce(turns.c.parked_at, now),
                    limit_parks=turns.c.limit_parks + 1,
                )
                .returning(turns.c.task_id)
            )
            task = await conn.execute(
                tasks.update()
                .where(tasks.c.id == parked.scalar_one())
                .values(status=TaskStatus.WAITING_FOR_LIMIT.value, updated_at=now)
                .returning(tasks)
            )
            return task_of(task.one())

    async def claim_turn(self, turn_id: int, runner: str | None = None) -> tuple[Task, Turn] | None:
        """Atomically move a queued turn to running: only the oldest queued turn of its task, and
        only while no other turn of the task runs. A second run of the same job gets None.
        Returns the running task and turn."""
        now = self._clock()
        task_of_turn = sa.select(turns.c.task_id).where(turns.c.id == turn_id).scalar_subquery()
        async with self._engine.begin() as conn:
            if not self._engine.one_writer:
                # Touching the task row first serialises claims of one task (a row lock on
                # PostgreSQL); SQLite's writers never overlap.
                touched = await conn.execute(
                    tasks.update()
                    .where(tasks.c.id == task_of_turn)
                    .values(updated_at=now)
                    .returning(tasks.c.id)
                )
                if touched.scalar() is None:
                    return None
            other = turns.alias("other")
            blocked = sa.select(other.c.id).where(
                other.c.task_id == turns.c.task_id,
                sa.or_(
                    other.c.status == TaskStatus.RUNNING.value,
                    sa.and_(other.c.status == TaskStatus.QUEUED.value, other.c.seq < turns.c.seq),
                ),
            )
            claimed = (
                await conn.execute(
                    turns.update()
                    .where(
                        turns.c.id == turn_id,
                        turns.c.status == TaskStatus.QUEUED.value,
                        ~sa.exists(blocked),
                    )
                    .values(
                        status=TaskStatus.RUNNING.value,
                        started_at=now,
                        runs=turns.c.runs + 1,
                        runner=runner,
                        stop_requested=False,
                    )
                    .returning(turns)
                )
            ).first()
            if claimed is None:
                return None
            task = await conn.execute(
                tasks.update()
                .where(tasks.c.id == claimed.task_id)
                .values(status=TaskStatus.RUNNING.value, updated_at=now)
                .returning(tasks)
            )
            return task_of(task.one()), turn_of(claimed)

    async def request_stop(self, task_id: int) -> bool:
        """Ask whichever process runs this task's turn to stop it; False if none runs."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                turns.update()
                .where(turns.c.task_id == task_id, turns.c.status == TaskStatus.RUNNING.value)
                .values(stop_requested=True)
            )
        return result.rowcount > 0

    async def stops_requested(self) -> list[int]:
        """Tasks whose running turn was asked to stop from another process (`detach mcp`)."""
        query = sa.select(turns.c.task_id).where(
            turns.c.status == TaskStatus.RUNNING.value, turns.c.stop_requested.is_(True)
        )
        async with self._engine.connect() as conn:
            return [r[0] for r in await conn.execute(query)]

    async def stop_requested(self, turn_id: int) -> bool:
        async with self._engine.connect() as conn:
            return bool(
                (
                    await conn.execute(
                        sa.select(turns.c.stop_requested).where(turns.c.id == turn_id)
                    )
                ).scalar()
            )
