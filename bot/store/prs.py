"""The pull request of a worktree task (``bot.prs``): one per task, followed until it is merged
or closed."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import sqlalchemy as sa

from bot.store.db import Clock, Database
from bot.store.schema import task_prs


class PrState(StrEnum):
    OPEN = "open"
    MERGED = "merged"
    CLOSED = "closed"


class ChecksState(StrEnum):
    """Its head commit's checks, summed up: none yet, some running, all passed, one failed."""

    NONE = "none"
    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"


@dataclass(frozen=True, slots=True)
class PrRow:
    task_id: int
    repo: str  # owner/name
    number: int
    url: str
    head_sha: str
    state: PrState = PrState.OPEN
    checks: ChecksState = ChecksState.NONE
    remote_url: str = ""  # where its branch was pushed: later pushes go there or nowhere


class PrRepo:
    def __init__(self, db: Database, clock: Clock) -> None:
        self._db = db
        self._clock = clock

    async def put(self, row: PrRow) -> None:
        """The task's PR is ``row`` (a new one replaces the one it had)."""
        values = {
            "repo": row.repo,
            "number": row.number,
            "url": row.url,
            "head_sha": row.head_sha,
            "state": row.state.value,
            "checks": row.checks.value,
            "remote_url": row.remote_url,
            "updated_at": self._clock(),
        }
        async with self._db.begin() as conn:
            await conn.execute(task_prs.delete().where(task_prs.c.task_id == row.task_id))
            await conn.execute(task_prs.insert().values(task_id=row.task_id, **values))

    async def get(self, task_id: int) -> PrRow | None:
        async with self._db.connect() as conn:
            found = (
                await conn.execute(task_prs.select().where(task_prs.c.task_id == task_id))
            ).first()
        return _row(found) if found is not None else None

    async def open_ones(self, task_ids: list[int] | None = None) -> list[PrRow]:
        """The PRs still open (of ``task_ids`` when given), oldest task first."""
        query = task_prs.select().where(task_prs.c.state == PrState.OPEN.value)
        if task_ids is not None:
            query = query.where(task_prs.c.task_id.in_(task_ids))
        async with self._db.connect() as conn:
            rows = (await conn.execute(query.order_by(task_prs.c.task_id))).all()
        return [_row(r) for r in rows]


def _row(r: sa.Row) -> PrRow:
    state, checks = PrState(r.state), ChecksState(r.checks)
    return PrRow(r.task_id, r.repo, r.number, r.url, r.head_sha, state, checks, r.remote_url)
