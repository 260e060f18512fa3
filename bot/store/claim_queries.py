"""The statements of the turn queue (``ClaimRepo``), built once: which turn of a task may go
next, the claims (of the shared queue's oldest turn, of one turn by its id), the conditions of a
runner's writes, and the NOTIFY channel of submitted turns."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from bot.models import TaskStatus
from bot.store.claim_fits import fits, preferred
from bot.store.schema import runners, tasks, turns

TURNS_CHANNEL = "detach_turns"  # NOTIFY channel: a turn was submitted


@dataclass(frozen=True, slots=True)
class ClaimedBy:
    """A new task's first turn is inserted claimed by ``runner`` (None: the one process),
    its task running: the claim's two UPDATEs saved. Safe as no other turn of the task can
    exist yet, and nobody sees the turn before its creator's transaction commits."""

    runner: str | None


def held_by(runner: str | sa.BindParameter[str] | None) -> tuple[sa.ColumnElement[bool], ...]:
    """The conditions of a write that only the runner holding a running turn may make (None:
    one process, no condition; a bound parameter in a statement built once)."""
    if runner is None:
        return ()
    return (turns.c.status == TaskStatus.RUNNING.value, turns.c.runner == runner)


def _blocked() -> sa.Select[Any]:
    """Another turn of the same task that must go first: one running, or one queued before."""
    other = turns.alias("other")
    return sa.select(other.c.id).where(
        other.c.task_id == turns.c.task_id,
        sa.or_(
            other.c.status == TaskStatus.RUNNING.value,
            sa.and_(other.c.status == TaskStatus.QUEUED.value, other.c.seq < turns.c.seq),
        ),
    )


HEAD = 64  # a claim looks at the oldest submitted turns first, whatever the planner thinks


def _claiming(*where: sa.ColumnElement[bool]) -> sa.Update:
    """The turn ``where`` picks runs now, on the claiming runner (parameters: now, runner)."""
    return (
        turns.update()
        .where(*where)
        .values(
            status=TaskStatus.RUNNING.value,
            started_at=sa.bindparam("now"),
            runs=turns.c.runs + 1,
            runner=sa.bindparam("runner"),
            # the host of the claiming runner's lease (none in one process: no lease)
            host=sa.select(runners.c.host)
            .where(runners.c.id == sa.bindparam("runner"))
            .scalar_subquery(),
            stop_requested=False,
        )
        .returning(turns)
    )


def _claim_next(head: int | None) -> sa.Update:
    """The claim of the shared queue, built once (its parameters: runner, engines, on_host,
    projects, now, settled): the oldest submitted turn the runner may take (``claim_fits``:
    it fits the runner, and no better runner should have it) becomes its running turn; one
    that another runner is claiming is skipped. With ``head``, only among the ``head`` oldest
    submitted turns (the partial index ``ix_turns_queue`` gives them): a bounded claim, so a
    planner without statistics (a table autovacuum has not analyzed yet) cannot make every
    claim join the whole queue with every task; without, among all of them."""
    blocked = _blocked()
    alive = sa.select(runners.c.id).where(
        runners.c.id == sa.bindparam("runner"),
        runners.c.taken_at.is_(None),
        runners.c.stopped_at.is_(None),
    )
    runnable = fits()
    # 'queued' as a literal in the statement, not a parameter: a prepared statement's generic
    # plan can then use the partial index (whose predicate is that literal)
    queued: sa.ColumnElement[str] = sa.literal_column(f"'{TaskStatus.QUEUED.value}'")
    submitted = (turns.c.status == queued, turns.c.submitted_at.is_not(None))
    oldest = (turns.c.submitted_at, turns.c.id)
    where = [*submitted, sa.exists(runnable), ~sa.exists(blocked), sa.exists(alive), preferred()]
    if head is not None:
        first = turns.alias("first")
        ids = (
            sa.select(first.c.id)
            .where(first.c.status == queued, first.c.submitted_at.is_not(None))
            .order_by(first.c.submitted_at, first.c.id)
            .limit(head)
        )
        where.append(turns.c.id.in_(ids.scalar_subquery()))
    candidate = (
        sa.select(turns.c.id)
        .where(*where)
        .order_by(*oldest)
        .limit(1)
        .with_for_update(skip_locked=True, of=turns)
        .scalar_subquery()
    )
    return _claiming(turns.c.id == candidate)


@functools.cache
def claims() -> tuple[sa.Update, sa.Update]:
    """The claims of the shared queue: its head first, then all of it. Built on the first claim
    (a worker's, scale-out only): about 1 MB the one-process bot never holds."""
    return _claim_next(HEAD), _claim_next(None)


# Statements a turn (or every pass of the intake) runs, built once: each took longer to build
# than SQLite takes to run it.
@functools.cache
def next_queued() -> sa.Select[Any]:
    """The oldest queued turn of a task, if no turn of it runs (parameter: task_id)."""
    task_id: sa.BindParameter[int] = sa.bindparam("task_id")
    running = sa.select(turns.c.id).where(
        turns.c.task_id == task_id, turns.c.status == TaskStatus.RUNNING.value
    )
    return (
        turns.select()
        .where(
            turns.c.task_id == task_id,
            turns.c.status == TaskStatus.QUEUED.value,
            ~sa.exists(running),
        )
        .order_by(turns.c.seq)
        .limit(1)
    )


@functools.cache
def unsubmitted() -> sa.Select[Any]:
    return (
        sa.select(turns.c.task_id)
        .where(turns.c.status == TaskStatus.QUEUED.value, turns.c.submitted_at.is_(None))
        .group_by(turns.c.task_id)
        .order_by(sa.func.min(turns.c.id))
    )


@functools.cache
def stops_requested() -> sa.Select[Any]:
    return sa.select(turns.c.task_id).where(
        turns.c.status == TaskStatus.RUNNING.value, turns.c.stop_requested.is_(True)
    )


@functools.cache
def task_runs() -> sa.Update:
    """The task of a claimed turn runs now (parameters: task_id, now)."""
    return (
        tasks.update()
        .where(tasks.c.id == sa.bindparam("task_id"))
        .values(status=TaskStatus.RUNNING.value, updated_at=sa.bindparam("now"))
        .returning(tasks)
    )


@functools.cache
def placed() -> sa.Update:
    """A task claimed on a host: its session lives there from now on, and its directory is
    that host's (parameters: task_id, on_host, to_cwd)."""
    return (
        tasks.update()
        .where(tasks.c.id == sa.bindparam("task_id"))
        .values(session_host=sa.bindparam("on_host"), cwd=sa.bindparam("to_cwd"))
        .returning(tasks)
    )


@functools.cache
def slot_taken() -> sa.Update:
    """A runner claimed a turn: one free slot fewer until its next heartbeat says how many it
    has (other runners compare theirs with it; parameter: runner)."""
    return (
        runners.update()
        .where(runners.c.id == sa.bindparam("runner"), runners.c.free > 0)
        .values(free=runners.c.free - 1)
    )


@functools.cache
def claim_by_id() -> tuple[sa.Update, sa.Update]:
    """The claim of one turn by its id (parameters: turn_id, runner, now), built once: it took
    1.2 ms to build, four times what it takes to run. First the touch of its task's row that
    serialises claims of one task on PostgreSQL, then the claim itself."""
    task_of_turn = (
        sa.select(turns.c.task_id).where(turns.c.id == sa.bindparam("turn_id")).scalar_subquery()
    )
    touch = (
        tasks.update()
        .where(tasks.c.id == task_of_turn)
        .values(updated_at=sa.bindparam("now"))
        .returning(tasks.c.id)
    )
    blocked = _blocked()
    claim = _claiming(
        turns.c.id == sa.bindparam("turn_id"),
        turns.c.status == TaskStatus.QUEUED.value,
        ~sa.exists(blocked),
    )
    return touch, claim
