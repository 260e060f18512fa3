"""The queue of turns in the app's tables: which turn of a task may go next, submitting it
once, the atomic claim that starts it, a usage limit sending it back, and stops asked for by
another process."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from datetime import datetime, timedelta

import sqlalchemy as sa

from bot.errors import TurnTaken
from bot.models import Task, TaskStatus, Turn
from bot.store import claim_queries as queries
from bot.store.claim_queries import TURNS_CHANNEL, held_by
from bot.store.db import Clock, Connection, Database
from bot.store.schema import tasks, turns
from bot.store.task_rows import task_of, turn_of


async def _running(conn: Connection, claimed: sa.Row, now: datetime) -> tuple[Task, Turn]:  # type: ignore[type-arg]
    """The task of a turn just claimed runs now (in the claim's transaction)."""
    task = await conn.execute(queries.task_runs(), {"task_id": claimed.task_id, "now": now})
    return task_of(task.one()), turn_of(claimed)


class ClaimRepo:
    """Reads and writes of ``turns`` (and their task's status) that move a turn through the
    queue; what a turn holds and how it ends is ``TaskRepo``'s."""

    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def next_queued_turn(self, task_id: int) -> Turn | None:
        """The oldest queued turn of a task, if no turn of it is running."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(queries.next_queued(), {"task_id": task_id})).first()
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
        async with self._engine.connect() as conn:
            return [r[0] for r in await conn.execute(queries.unsubmitted())]

    async def park_turn(self, turn_id: int, runner: str | None = None) -> Task:
        """A turn its engine's usage limit stopped goes back to the queue, unsubmitted (it is
        submitted again once the limit has reset), and its task waits for the limit. Raises
        ``TurnTaken`` when the turn is no longer this ``runner``'s to park."""
        now = self._clock()
        async with self._engine.begin() as conn:
            parked = await conn.execute(
                turns.update()
                .where(turns.c.id == turn_id, *held_by(runner))
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
            task_id = parked.scalar()
            if task_id is None:
                raise TurnTaken(turn_id)
            task = await conn.execute(
                tasks.update()
                .where(tasks.c.id == task_id)
                .values(status=TaskStatus.WAITING_FOR_LIMIT.value, updated_at=now)
                .returning(tasks)
            )
            return task_of(task.one())

    async def claim_turn(self, turn_id: int, runner: str | None = None) -> tuple[Task, Turn] | None:
        """Atomically move a queued turn to running: only the oldest queued turn of its task, and
        only while no other turn of the task runs. A second run of the same job gets None.
        Returns the running task and turn."""
        now = self._clock()
        params = {"turn_id": turn_id, "runner": runner, "now": now}
        touch, claim = queries.claim_by_id()
        async with self._engine.begin() as conn:
            # Touching the task row first serialises claims of one task (a row lock on
            # PostgreSQL); SQLite's writers never overlap.
            if not self._engine.one_writer and (await conn.execute(touch, params)).scalar() is None:
                return None
            claimed = (await conn.execute(claim, params)).first()
            if claimed is None:
                return None
            return await _running(conn, claimed, now)

    async def claim_next(
        self,
        runner: str,
        engines: Collection[str],
        host: str = "",
        projects: Mapping[str, str] | None = None,
        prefer_s: float = 0.0,
    ) -> tuple[Task, Turn] | None:
        """Scale-out: claim the oldest submitted turn this runner (registered, not taken over)
        on ``host`` can run (its engine is one of ``engines``, it is pinned to no other host,
        its session lives nowhere else, its project is one of ``projects``: name to this
        host's directory; it is its task's oldest queued turn and no turn of the task runs);
        turns other runners are claiming at that moment are skipped (``FOR UPDATE SKIP
        LOCKED``), so each turn goes to one runner. Returns the running task and turn, the
        task's directory this host's. For ``prefer_s`` after its submission a turn is left
        to a better runner it fits (more plan left, then more free slots: ``claim_fits``)."""
        now, projects = self._clock(), projects or {}
        params = {"runner": runner, "engines": list(engines), "now": now}
        params["settled"] = now - timedelta(seconds=prefer_s)
        params |= {"on_host": host, "projects": list(projects)}
        async with self._engine.begin() as conn:
            for claim in queries.claims():
                claimed = (await conn.execute(claim, params)).first()
                if claimed is not None:
                    break
            else:
                return None
            task, turn = await _running(conn, claimed, now)
            await conn.execute(queries.slot_taken(), {"runner": runner})
            cwd = projects.get(task.project, task.cwd) if task.project else task.cwd
            session_host = host or task.session_host  # no host named: as it was
            if session_host != task.session_host or cwd != task.cwd:
                values = {"task_id": task.id, "on_host": session_host, "to_cwd": cwd}
                task = task_of((await conn.execute(queries.placed(), values)).one())
            return task, turn

    async def announce(self) -> None:
        """Wake the runners of a shared PostgreSQL database: a turn was submitted (delivered
        when the current transaction commits)."""
        if self._engine.engine.dialect.name != "postgresql":
            return
        async with self._engine.begin() as conn:
            await conn.execute(sa.text(f"NOTIFY {TURNS_CHANNEL}"))

    async def request_stop(self, task_id: int) -> bool:
        """Ask whichever process runs this task's turn to stop it; False if none runs."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                turns.update()
                .where(turns.c.task_id == task_id, turns.c.status == TaskStatus.RUNNING.value)
                .values(stop_requested=True)
            )
        return result.rowcount > 0

    async def runner_of(self, task_id: int) -> str | None:
        """The runner of the task's running turn (None: none runs)."""
        query = sa.select(turns.c.runner).where(
            turns.c.task_id == task_id, turns.c.status == TaskStatus.RUNNING.value
        )
        async with self._engine.connect() as conn:
            return (await conn.execute(query.limit(1))).scalar()

    async def stops_requested(self) -> list[int]:
        """Tasks whose running turn was asked to stop from another process (`detach mcp`)."""
        async with self._engine.connect() as conn:
            return [r[0] for r in await conn.execute(queries.stops_requested())]

    async def request_steer(self, turn_id: int) -> bool:
        """Ask the bot to steer this queued follow-up into its task's running turn (it is
        queued by a process that runs no turn: `detach mcp`); False once it is not queued."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                turns.update()
                .where(turns.c.id == turn_id, turns.c.status == TaskStatus.QUEUED.value)
                .values(steer_requested=True)
            )
        return result.rowcount == 1

    async def take_steers(self) -> list[int]:
        """The queued follow-ups asked to be steered, each handed out once (oldest first); a
        read when there are none (the intake asks every poll)."""
        # by the status index: a flag whose turn went on (ran, was taken in) is never read again
        waiting = (turns.c.status == TaskStatus.QUEUED.value, turns.c.steer_requested.is_(True))
        asked = sa.select(turns.c.id).where(*waiting).limit(1)
        async with self._engine.connect() as conn:
            if (await conn.execute(asked)).first() is None:
                return []
        async with self._engine.begin() as conn:
            found = await conn.execute(
                turns.update().where(*waiting).values(steer_requested=False).returning(turns.c.id)
            )
            return sorted(int(r.id) for r in found)

    async def stop_requested(self, turn_id: int) -> bool:
        async with self._engine.connect() as conn:
            return bool(
                (
                    await conn.execute(
                        sa.select(turns.c.stop_requested).where(turns.c.id == turn_id)
                    )
                ).scalar()
            )

    async def holds(self, turn_id: int, runner: str) -> bool:
        """Whether ``runner`` still runs the turn (another process may have taken it over)."""
        query = sa.select(turns.c.id).where(turns.c.id == turn_id, *held_by(runner))
        async with self._engine.connect() as conn:
            return (await conn.execute(query)).first() is not None
