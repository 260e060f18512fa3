"""Rows about where a task works and where it came from: its own git worktree (on which branch,
cut from what), and the task file it was dropped in as."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from bot.models import WorktreeState
from bot.rows import TaskFileRow
from bot.store.db import Clock, Database
from bot.store.schema import task_files, worktrees

ACTIVE, MERGED, DISCARDED = WorktreeState.ACTIVE, WorktreeState.MERGED, WorktreeState.DISCARDED


@functools.cache
def _unexported() -> sa.Select[Any]:
    return sa.select(task_files.c.task_id).where(task_files.c.exported_at.is_(None))


@dataclass(frozen=True, slots=True)
class WorktreeRow:
    task_id: int
    repo_root: str
    path: str
    branch: str
    base_branch: str
    base_commit: str
    state: str


class WorktreeRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def add(self, row: WorktreeRow) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                worktrees.insert().values(
                    task_id=row.task_id,
                    repo_root=row.repo_root,
                    path=row.path,
                    branch=row.branch,
                    base_branch=row.base_branch,
                    base_commit=row.base_commit,
                    state=row.state,
                    created_at=self._clock(),
                )
            )

    async def get(self, task_id: int) -> WorktreeRow | None:
        async with self._engine.connect() as conn:
            r = (await conn.execute(_worktree(), {"task_id": task_id})).first()
        if r is None:
            return None
        return WorktreeRow(
            r.task_id, r.repo_root, r.path, r.branch, r.base_branch, r.base_commit, r.state
        )

    async def set_state(self, task_id: int, state: str) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(worktrees).where(worktrees.c.task_id == task_id).values(state=state)
            )

    async def reopen(self, task_id: int, base_commit: str) -> None:
        """The task's worktree is there again (cut again from ``base_commit``): active."""
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(worktrees)
                .where(worktrees.c.task_id == task_id)
                .values(state=ACTIVE.value, base_commit=base_commit)
            )

    async def states_of(self, task_ids: list[int]) -> dict[int, str]:
        """Each of these tasks' worktree state (a task without one: absent)."""
        if not task_ids:
            return {}
        query = sa.select(worktrees.c.task_id, worktrees.c.state).where(
            worktrees.c.task_id.in_(task_ids)
        )
        async with self._engine.connect() as conn:
            return {r.task_id: r.state for r in await conn.execute(query)}


class TaskFileRepo:
    def __init__(self, engine: Database, clock: Clock) -> None:
        self._engine = engine
        self._clock = clock

    async def add(self, row: TaskFileRow) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                task_files.insert().values(
                    task_id=row.task_id,
                    source=row.source,
                    goal=row.goal,
                    constraints=row.constraints,
                )
            )

    async def get(self, task_id: int) -> TaskFileRow | None:
        async with self._engine.connect() as conn:
            r = (
                await conn.execute(task_files.select().where(task_files.c.task_id == task_id))
            ).first()
        return TaskFileRow(r.task_id, r.source, r.goal, r.constraints) if r else None

    async def unexported(self) -> list[int]:
        async with self._engine.connect() as conn:
            return list((await conn.execute(_unexported())).scalars())

    async def exported(self, task_id: int) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                sa.update(task_files)
                .where(task_files.c.task_id == task_id)
                .values(exported_at=self._clock())
            )


@functools.cache
def _worktree() -> sa.Select[Any]:
    """A task's worktree (parameter: task_id), read for every card: built once."""
    return worktrees.select().where(worktrees.c.task_id == sa.bindparam("task_id"))
