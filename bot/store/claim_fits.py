"""Which queued turn fits a claiming runner, and which runner it should rather go to (#57): the
conditions the claim of the shared queue (``claim_queries``) puts on a turn's task.

A task fits a runner when its engine is one the runner has, it is pinned to no host or to the
runner's, its session lives nowhere yet or on the runner's host, and its project (if any) is
one the runner has; a task with a plain directory and no project fits the hosts whose projects
hold that directory (it or a directory above it), or any host when no live host announces one
that does.

Among the runners it fits, a runner leaves it to another online one that has strictly more of
the task's engine's plan left, or as much and strictly more free slots (as their last
heartbeats said: the same numbers for every claimer, so of two runners one always goes
ahead), for ``settled`` at most: after that any runner it fits takes it, so a better host that
does not claim never holds a task up for longer."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa

from bot.models import ProcessRole
from bot.store.schema import runner_engines, runner_projects, runners, tasks, turns

FRONT = ProcessRole.FRONT.value


def _live(r: Any) -> tuple[sa.ColumnElement[bool], ...]:
    """``r`` is a runner that runs turns and whose lease holds (parameter: now)."""
    return (
        r.c.taken_at.is_(None),
        r.c.stopped_at.is_(None),
        r.c.role != FRONT,
        r.c.expires_at >= sa.bindparam("now"),
    )


def _holds(t: Any, path: sa.ColumnElement[str]) -> sa.ColumnElement[bool]:
    """The task's directory is ``path`` or below it."""
    prefix = path + "/"
    return sa.or_(t.c.cwd == path, sa.func.substr(t.c.cwd, 1, sa.func.length(prefix)) == prefix)


def _held_by(t: Any, host: Any = None) -> sa.Exists:
    """A live runner (on ``host``; None: any) announces a project that holds the task's
    directory."""
    r, p = runners.alias(), runner_projects.alias()
    where = [p.c.runner == r.c.id, *_live(r), _holds(t, p.c.path)]
    if host is not None:
        where.append(r.c.host == host)
    return sa.exists(sa.select(p.c.runner).where(*where))


def placed_on(t: Any, host: Any) -> tuple[sa.ColumnElement[bool], ...]:
    """The task ``t`` may run on ``host``: its pin, its session's host and its directory."""
    return (
        sa.or_(t.c.host.is_(None), t.c.host == host),
        sa.or_(t.c.session_id.is_(None), t.c.session_host.is_(None), t.c.session_host == host),
        sa.or_(t.c.project.is_not(None), _held_by(t, host), ~_held_by(t)),
    )


def fits() -> sa.Select[Any]:
    """The turn's task fits the claiming runner (parameters: engines, on_host, projects,
    now)."""
    return sa.select(tasks.c.id).where(
        tasks.c.id == turns.c.task_id,
        tasks.c.engine.in_(sa.bindparam("engines", expanding=True)),
        *placed_on(tasks, sa.bindparam("on_host")),
        sa.or_(
            tasks.c.project.is_(None), tasks.c.project.in_(sa.bindparam("projects", expanding=True))
        ),
    )


def _better() -> sa.Select[Any]:
    """Another online runner with a free slot that the turn's task fits and that has more of
    the plan of its engine left, or as much and more free slots (parameters: runner, now)."""
    t, o, oe = tasks.alias("t"), runners.alias("o"), runner_engines.alias("oe")
    me, mine = runner_engines.alias("me"), runners.alias("mine")
    runner: sa.BindParameter[str] = sa.bindparam("runner")
    my_left = sa.func.coalesce(
        sa.select(me.c.plan_left)
        .where(me.c.runner == runner, me.c.engine == t.c.engine)
        .scalar_subquery(),
        1.0,
    )
    my_free = sa.func.coalesce(
        sa.select(mine.c.free).where(mine.c.id == runner).scalar_subquery(), 0
    )
    has_project = sa.select(runner_projects.c.runner).where(
        runner_projects.c.runner == o.c.id, runner_projects.c.project == t.c.project
    )
    return (
        sa.select(o.c.id)
        .select_from(o.join(oe, oe.c.runner == o.c.id).join(t, t.c.engine == oe.c.engine))
        .where(
            t.c.id == turns.c.task_id,
            o.c.id != runner,
            *_live(o),
            o.c.online_until >= sa.bindparam("now"),
            o.c.free > 0,
            *placed_on(t, o.c.host),
            sa.or_(t.c.project.is_(None), sa.exists(has_project)),
            sa.or_(
                oe.c.plan_left > my_left, sa.and_(oe.c.plan_left == my_left, o.c.free > my_free)
            ),
        )
    )


def preferred() -> sa.ColumnElement[bool]:
    """The claiming runner may take the turn: it waited ``settled`` (a parameter: the time
    before which a submitted turn goes to any runner it fits), or no runner is better."""
    return sa.or_(turns.c.submitted_at <= sa.bindparam("settled"), ~sa.exists(_better()))
