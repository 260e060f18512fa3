"""Tasks and their turns: creation, follow-ups, outcomes, settings of a task, listings (the
queue of turns, from submission to the claim, is `bot.store.claims`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from bot.errors import TurnTaken
from bot.models import (
    ACTIVE_STATUSES,
    Engine,
    NewTask,
    Task,
    TaskStatus,
    Turn,
)
from bot.redaction import NOTHING, Redactor
from bot.store.claim_queries import ClaimedBy, held_by
from bot.store.db import Clock, Database, inserting, updating
from bot.store.schema import tasks, turns
from bot.store.task_rows import TurnOutcome, redacted_error, task_of, turn_of


@functools.cache
def _finish(held: bool) -> tuple[sa.Update, sa.Update]:
    """A turn's outcome and its task's status, built once (``held``: only while the runner
    holds the turn); parameters: turn_id, task_id, b_runner, o_ and the outcome's columns,
    cost, now."""
    bind = sa.bindparam
    # parameter names differ from the columns they set: SQLAlchemy keeps those for itself
    turn_ends = (
        turns.update()
        .where(turns.c.id == bind("turn_id"), *(held_by(bind("b_runner")) if held else ()))
        .values(
            {
                column: bind(f"o_{column}")
                for column in (
                    "status",
                    "result_text",
                    "error",
                    "stderr_tail",
                    "cost_usd",
                    "input_tokens",
                    "output_tokens",
                    "model",
                    "unpriced",
                )
            }
            | {"finished_at": bind("now")}
        )
        .returning(turns)
    )
    queued = sa.exists(
        sa.select(turns.c.id).where(
            turns.c.task_id == bind("task_id"), turns.c.status == TaskStatus.QUEUED.value
        )
    )
    task_follows = (
        tasks.update()
        .where(tasks.c.id == bind("task_id"))
        .values(
            status=sa.case((queued, TaskStatus.QUEUED.value), else_=bind("o_status")),
            updated_at=bind("now"),
            total_cost_usd=tasks.c.total_cost_usd + bind("cost", type_=sa.Float),
        )
        .returning(tasks)
    )
    return turn_ends, task_follows


@functools.cache
def _unannounced() -> sa.Select[Any]:
    return tasks.select().where(tasks.c.announced.is_(False))


class TaskRepo:
    """All reads and writes of ``tasks`` and ``turns``."""

    def __init__(self, engine: Database, clock: Clock, redact: Redactor = NOTHING) -> None:
        """``redact``: applied to a turn's answer, error and stderr as they are written and
        read."""
        self._engine = engine
        self._clock = clock
        self._redact = redact

    async def create(
        self,
        new: NewTask,
        slug: str,
        submitted: bool = False,
        waits: bool = False,
        claim: ClaimedBy | None = None,
    ) -> tuple[Task, Turn]:
        """A new task and its first turn; ``submitted``: the caller submits that turn to its
        pool right after the commit (a new task has no other turn to wait for), so nobody
        else may (a crash before it: ``unsubmit_queued`` at the next start). ``waits``: its
        engine's usage limit is reached; the task waits for it from now. ``claim``: the
        first turn is inserted already claimed by that runner, and its task running."""
        now = self._clock()
        status = TaskStatus.WAITING_FOR_LIMIT if waits else TaskStatus.QUEUED
        if claim is not None:
            status, submitted = TaskStatus.RUNNING, True
        async with self._engine.begin() as conn:
            inserted = await conn.execute(
                inserting(tasks, returning=True),
                {
                    "owner_id": new.owner_id,
                    "chat_id": new.chat_id,
                    "engine": new.engine,
                    "kind": new.kind.value,
                    "slug": slug,
                    "title": (new.title or new.prompt)[:200],
                    "cwd": str(new.cwd),
                    "model": new.model,
                    "status": status.value,
                    "locale": new.locale,
                    "announced": new.announced,
                    "created_at": now,
                    "updated_at": now,
                    "approval_mode": new.approval_mode.value,
                    "preset": new.preset,
                    "max_usd": new.max_usd,
                    "check_command": new.check,
                    "check_repository": new.check_repository,
                    "parent_id": new.parent_id,
                    "subtasks": new.subtasks,
                    "total_cost_usd": new.spent_usd,
                    "host": new.host,
                    "project": new.project,
                },
            )
            task = task_of(inserted.one())
            turn = await self._insert_turn(
                conn, task.id, 1, new.prompt, submitted=submitted, parked=waits, claim=claim
            )
        return task, turn

    async def add_turn(self, task_id: int, prompt: str, check_round: int = 1) -> Turn:
        """Queue a follow-up; the task becomes queued again unless a turn is running.
        ``check_round`` above 1: the turn a failed check asked for."""
        async with self._engine.begin() as conn:
            seq = (
                await conn.execute(
                    sa.select(sa.func.coalesce(sa.func.max(turns.c.seq), 0)).where(
                        turns.c.task_id == task_id
                    )
                )
            ).scalar_one()
            turn = await self._insert_turn(conn, task_id, seq + 1, prompt, check_round)
            await conn.execute(
                tasks.update()
                .where(
                    tasks.c.id == task_id,
                    tasks.c.status.not_in(
                        [TaskStatus.RUNNING.value, TaskStatus.WAITING_FOR_LIMIT.value]
                    ),
                )
                .values(status=TaskStatus.QUEUED.value, updated_at=self._clock())
            )
        return turn

    async def _insert_turn(
        self,
        conn: Any,
        task_id: int,
        seq: int,
        prompt: str,
        check_round: int = 1,
        submitted: bool = False,
        parked: bool = False,
        claim: ClaimedBy | None = None,
    ) -> Turn:
        now = self._clock()
        row = {
            "task_id": task_id,
            "seq": seq,
            "prompt": prompt,
            "check_round": check_round,
            "status": TaskStatus.QUEUED.value,
            "created_at": now,
            "submitted_at": now if submitted else None,
            "parked_at": now if parked else None,
        }
        if claim is not None:  # what ``ClaimRepo.claim_turn`` would set, in the insert
            row |= {"status": TaskStatus.RUNNING.value, "started_at": now, "runs": 1}
            row |= {"runner": claim.runner, "stop_requested": False}
        result = await conn.execute(inserting(turns, returning=True), row)
        return turn_of(result.one(), self._redact)

    async def unpin(self, task_id: int, fresh: bool) -> bool:
        """A queued task runs on any host that fits; ``fresh``: in a new session (the one it
        had lives on a host that is gone). False once it is not queued."""
        values: dict[str, Any] = {"host": None}
        if fresh:
            values |= {"session_id": None, "session_host": None}
        async with self._engine.begin() as conn:
            result = await conn.execute(
                tasks.update()
                .where(tasks.c.id == task_id, tasks.c.status == TaskStatus.QUEUED.value)
                .values(**values, updated_at=self._clock())
            )
        return result.rowcount == 1

    async def get(self, task_id: int) -> Task | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(tasks.select().where(tasks.c.id == task_id))).first()
        return task_of(row) if row else None

    async def get_turn(self, turn_id: int) -> Turn | None:
        async with self._engine.connect() as conn:
            row = (await conn.execute(turns.select().where(turns.c.id == turn_id))).first()
        return turn_of(row, self._redact) if row else None

    async def last_turn(self, task_id: int) -> Turn | None:
        query = turns.select().where(turns.c.task_id == task_id).order_by(turns.c.seq.desc())
        async with self._engine.connect() as conn:
            row = (await conn.execute(query.limit(1))).first()
        return turn_of(row, self._redact) if row else None

    async def first_turn(self, task_id: int) -> Turn | None:
        query = turns.select().where(turns.c.task_id == task_id).order_by(turns.c.seq)
        async with self._engine.connect() as conn:
            row = (await conn.execute(query.limit(1))).first()
        return turn_of(row, self._redact) if row else None

    async def move_to_engine(
        self,
        task_id: int,
        turn_id: int,
        engine: Engine,
        prompt: str,
        preset: str | None,
        model: str | None,
    ) -> Task | None:
        """A task that waits for its engine's usage limit goes on with ``engine``: a new
        session (none yet), the chat's preset for that engine, and its waiting turn asks
        ``prompt``. None when it no longer waits, or that turn was submitted meanwhile (its
        limit reset): then nothing changed."""
        now = self._clock()
        waiting = sa.exists(
            sa.select(turns.c.id).where(
                turns.c.id == turn_id,
                turns.c.task_id == task_id,
                turns.c.status == TaskStatus.QUEUED.value,
                turns.c.submitted_at.is_(None),
            )
        )
        async with self._engine.begin() as conn:
            moved = (
                await conn.execute(
                    tasks.update()
                    .where(
                        tasks.c.id == task_id,
                        tasks.c.status == TaskStatus.WAITING_FOR_LIMIT.value,
                        waiting,
                    )
                    .values(
                        engine=engine,
                        session_id=None,
                        preset=preset,
                        model=model,
                        status=TaskStatus.QUEUED.value,
                        updated_at=now,
                    )
                    .returning(tasks)
                )
            ).first()
            if moved is None:
                return None
            await conn.execute(
                turns.update().where(turns.c.id == turn_id).values(prompt=prompt, parked_at=None)
            )
            return task_of(moved)

    async def reroute(
        self, task_id: int, engine: Engine, preset: str | None, model: str | None
    ) -> Task | None:
        """A task none of whose turns has started yet goes to ``engine`` (``preset``,
        ``model``); None when one has (it runs, or ran): then nothing changed."""
        started = sa.exists(
            sa.select(turns.c.id).where(
                turns.c.task_id == task_id, turns.c.status != TaskStatus.QUEUED.value
            )
        )
        async with self._engine.begin() as conn:
            moved = (
                await conn.execute(
                    tasks.update()
                    .where(
                        tasks.c.id == task_id,
                        tasks.c.status == TaskStatus.QUEUED.value,
                        ~started,
                    )
                    .values(engine=engine, preset=preset, model=model, updated_at=self._clock())
                    .returning(tasks)
                )
            ).first()
        return task_of(moved) if moved is not None else None

    async def children(self, parent_id: int) -> list[Task]:
        """The sub-tasks a task's agent started, oldest first."""
        query = tasks.select().where(tasks.c.parent_id == parent_id).order_by(tasks.c.id)
        async with self._engine.connect() as conn:
            return [task_of(r) for r in await conn.execute(query)]

    async def turns_of(self, task_id: int, limit: int = 50) -> list[Turn]:
        """A task's turns, oldest first (its newest ``limit``)."""
        query = (
            turns.select()
            .where(turns.c.task_id == task_id)
            .order_by(turns.c.seq.desc())
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [turn_of(r, self._redact) for r in reversed(list(await conn.execute(query)))]

    async def set_cwd(self, task_id: int, cwd: str) -> Task:
        async with self._engine.begin() as conn:
            await conn.execute(
                tasks.update()
                .where(tasks.c.id == task_id)
                .values(cwd=cwd, updated_at=self._clock())
            )
        task = await self.get(task_id)
        assert task is not None
        return task

    async def set_session(self, task_id: int, session_id: str | None) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(
                updating(tasks),
                {"b_id": task_id, "session_id": session_id, "updated_at": self._clock()},
            )

    async def finish_turn(
        self, turn: Turn, outcome: TurnOutcome, runner: str | None = None
    ) -> tuple[Task, Turn]:
        """Record a turn's outcome; the task takes the outcome unless more turns are queued.
        Returns the task and the finished turn. With ``runner`` (scale-out) only while that
        runner holds the running turn; ``TurnTaken`` when another process took it over."""
        error = redacted_error(outcome.error, self._redact)
        params = {
            "turn_id": turn.id,
            "task_id": turn.task_id,
            "b_runner": runner,
            "o_status": outcome.status.value,
            "o_result_text": self._redact(outcome.result_text),
            "o_error": error.encode() if error else None,
            "o_stderr_tail": self._redact(outcome.stderr_tail),
            "o_cost_usd": outcome.cost_usd,
            "o_input_tokens": outcome.input_tokens,
            "o_output_tokens": outcome.output_tokens,
            "o_model": outcome.model,
            "o_unpriced": outcome.unpriced,
            "cost": outcome.cost_usd or 0.0,
            "now": self._clock(),
        }
        turn_ends, task_follows = _finish(runner is not None)
        async with self._engine.begin() as conn:
            row = (await conn.execute(turn_ends, params)).first()
            if row is None:
                raise TurnTaken(turn.id)
            finished_turn = turn_of(row, self._redact)
            task = await conn.execute(task_follows, params)
            return task_of(task.one()), finished_turn

    async def cancel_queued(self, task_id: int) -> int:
        """Cancel every queued turn of a task; returns how many."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                turns.update()
                .where(
                    turns.c.task_id == task_id,
                    turns.c.status == TaskStatus.QUEUED.value,
                )
                .values(status=TaskStatus.CANCELLED.value, finished_at=self._clock())
            )
        return int(result.rowcount)

    async def absorb_turn(self, task_id: int, turn_id: int) -> bool:
        """A queued turn whose prompt the running turn took in (a steer) is gone: it never runs
        as a turn of its own. False when it is no longer queued (cancelled meanwhile)."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                turns.delete().where(
                    turns.c.id == turn_id,
                    turns.c.task_id == task_id,
                    turns.c.status == TaskStatus.QUEUED.value,
                )
            )
        return result.rowcount == 1

    async def set_status(
        self, task_id: int, status: TaskStatus, only_from: Sequence[TaskStatus] | None = None
    ) -> bool:
        query = tasks.update().where(tasks.c.id == task_id)
        if only_from is not None:
            query = query.where(tasks.c.status.in_([s.value for s in only_from]))
        async with self._engine.begin() as conn:
            result = await conn.execute(query.values(status=status.value, updated_at=self._clock()))
        return result.rowcount == 1

    async def raise_budget(self, task_id: int, extra_usd: float) -> bool:
        """Extend: the budget of a task stopped at it grows by ``extra_usd``. One conditional
        statement: False, and nothing raised, once the task moved on (a follow-up)."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                tasks.update()
                .where(tasks.c.id == task_id, tasks.c.status == TaskStatus.BUDGET_EXCEEDED.value)
                .values(
                    max_usd=sa.func.coalesce(tasks.c.max_usd, 0) + extra_usd,
                    updated_at=self._clock(),
                )
            )
        return result.rowcount == 1

    async def top_by_cost(self, owner_id: int, limit: int = 5) -> list[Task]:
        query = (
            tasks.select()
            .where(tasks.c.owner_id == owner_id, tasks.c.total_cost_usd > 0)
            .order_by(tasks.c.total_cost_usd.desc())
            .limit(limit)
        )
        async with self._engine.connect() as conn:
            return [task_of(r) for r in await conn.execute(query)]

    async def set_announced(self, task_id: int) -> None:
        async with self._engine.begin() as conn:
            await conn.execute(tasks.update().where(tasks.c.id == task_id).values(announced=True))

    async def unannounced(self) -> list[Task]:
        async with self._engine.connect() as conn:
            rows = await conn.execute(_unannounced())
            return [task_of(r) for r in rows]

    async def list_for(
        self, owner_id: int | None, statuses: Sequence[TaskStatus] | None = None, limit: int = 20
    ) -> list[Task]:
        query = tasks.select().order_by(tasks.c.id.desc()).limit(limit)
        if owner_id is not None:
            query = query.where(tasks.c.owner_id == owner_id)
        if statuses is not None:
            query = query.where(tasks.c.status.in_([s.value for s in statuses]))
        async with self._engine.connect() as conn:
            return [task_of(r) for r in await conn.execute(query)]

    async def count_for(self, owner_id: int, statuses: Sequence[TaskStatus]) -> int:
        query = (
            sa.select(sa.func.count())
            .select_from(tasks)
            .where(tasks.c.owner_id == owner_id, tasks.c.status.in_([s.value for s in statuses]))
        )
        async with self._engine.connect() as conn:
            return int((await conn.execute(query)).scalar_one())

    async def archive_all(
        self, owner_id: int | None, newest: int
    ) -> tuple[list[tuple[int, int]], list[Task]]:
        """Archive every finished task of ``owner_id`` (None: of everyone; the machine's
        shell) in one statement; returns each one's (id, chat id), oldest first, and the newest
        ``newest`` of them as they are now (only those are read whole: 1,000 tasks archive in
        one light statement)."""
        query = tasks.update().where(tasks.c.status.not_in([*ACTIVE_STATUSES, TaskStatus.ARCHIVED]))
        if owner_id is not None:
            query = query.where(tasks.c.owner_id == owner_id)
        values = {"status": TaskStatus.ARCHIVED.value, "updated_at": self._clock()}
        async with self._engine.begin() as conn:
            result = await conn.execute(query.values(values).returning(tasks.c.id, tasks.c.chat_id))
            placed = sorted((int(r.id), int(r.chat_id)) for r in result)
            ids = [task_id for task_id, _ in placed[-newest:]] if newest > 0 else []
            rows = await conn.execute(
                tasks.select().where(tasks.c.id.in_(ids)).order_by(tasks.c.id)
            )
            return placed, [task_of(r) for r in rows]

    async def archive_finished(self, owner_id: int | None) -> list[Task]:
        """Archive every finished task (of ``owner_id``) in one statement; returns them as they
        are now, oldest first."""
        query = tasks.update().where(tasks.c.status.not_in([*ACTIVE_STATUSES, TaskStatus.ARCHIVED]))
        if owner_id is not None:
            query = query.where(tasks.c.owner_id == owner_id)
        values = {"status": TaskStatus.ARCHIVED.value, "updated_at": self._clock()}
        async with self._engine.begin() as conn:
            result = await conn.execute(query.values(values).returning(tasks))
            return sorted((task_of(r) for r in result), key=lambda t: t.id)
