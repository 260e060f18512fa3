"""What a crash or a lost runner leaves: running turns become interrupted (or cancelled, when
somebody asked to stop them), and their tasks say so. Conditional updates: of two processes
taking the same runner's turns over, only one gets each."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import sqlalchemy as sa

from bot.models import Task, TaskStatus, TurnError
from bot.store.db import Clock, Database
from bot.store.schema import tasks, turns
from bot.store.task_rows import task_of


class RecoveryRepo:
    """Turns left running by a process that is gone."""

    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def interrupt_runners(
        self, runner_ids: Collection[str]
    ) -> tuple[list[Task], list[Task], list[int]]:
        """Take over the running turns of dead runners: a turn somebody asked to stop is
        cancelled, every other one interrupted, and so is its task. Each turn's update is
        conditional on it still running there, so of two takers only one gets it. An unpinned
        task's next turn may go to any host (its session's host may be gone: it goes on in a
        new session told what happened so far). Returns the interrupted tasks, the cancelled
        ones and the turns taken."""
        now = self._clock()
        theirs = sa.and_(
            turns.c.status == TaskStatus.RUNNING.value, turns.c.runner.in_(list(runner_ids))
        )
        async with self._engine.begin() as conn:
            taken = list(
                await conn.execute(
                    turns.update()
                    .where(theirs)
                    .values(
                        status=sa.case(
                            (turns.c.stop_requested, TaskStatus.CANCELLED.value),
                            else_=TaskStatus.INTERRUPTED.value,
                        ),
                        finished_at=now,
                        error=sa.case(
                            (turns.c.stop_requested, TurnError("turn_error.cancelled").encode()),
                            else_=TurnError("turn_error.interrupted").encode(),
                        ),
                    )
                    .returning(turns.c.id, turns.c.task_id, turns.c.status)
                )
            )
            found: dict[str, list[Task]] = {"interrupted": [], "cancelled": []}
            for status in found:
                ids = sorted({r.task_id for r in taken if r.status == status})
                if not ids:
                    continue
                rows = await conn.execute(
                    tasks.update()
                    .where(tasks.c.id.in_(ids))
                    .values(status=status, updated_at=now, session_host=_moves())
                    .returning(tasks)
                )
                found[status] = sorted((task_of(r) for r in rows), key=lambda t: t.id)
        return found["interrupted"], found["cancelled"], [r.id for r in taken]

    async def interrupt_running(self) -> list[Task]:
        """After a crash of the one process: the turns it was running, and tasks marked running
        with no running turn at all, become interrupted; returns those tasks."""
        now = self._clock()
        mine = turns.c.status == TaskStatus.RUNNING.value
        async with self._engine.begin() as conn:
            ids = [
                r[0] for r in await conn.execute(sa.select(turns.c.task_id).where(mine).distinct())
            ]
            await conn.execute(
                turns.update()
                .where(mine)
                .values(
                    status=TaskStatus.INTERRUPTED.value,
                    finished_at=now,
                    error=TurnError("turn_error.interrupted").encode(),
                )
            )
            running = sa.select(turns.c.id).where(
                turns.c.task_id == tasks.c.id, turns.c.status == TaskStatus.RUNNING.value
            )
            ids += [
                r[0]
                for r in await conn.execute(
                    sa.select(tasks.c.id).where(
                        tasks.c.status == TaskStatus.RUNNING.value, ~sa.exists(running)
                    )
                )
                if r[0] not in ids
            ]
            await conn.execute(
                tasks.update()
                .where(tasks.c.id.in_(ids))
                .values(status=TaskStatus.INTERRUPTED.value, updated_at=now)
            )
            rows = await conn.execute(tasks.select().where(tasks.c.id.in_(ids)))
            return [task_of(r) for r in rows]


def _moves() -> sa.ColumnElement[Any]:
    """The session's host a task keeps when its runner is lost: none unless it is pinned."""
    return sa.case((tasks.c.host.is_(None), sa.null()), else_=tasks.c.session_host)
