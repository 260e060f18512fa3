"""Picking the host (issue #57), in the claim query itself, on SQLite and PostgreSQL: among the
hosts a task fits, a host leaves it to an online one with strictly more of its engine's plan
left (as its heartbeat announced its usage windows), then strictly more free slots, for the
preference's grace at most; a better host that does not fit, is offline or is full never holds
it. A plain directory goes to the hosts whose projects hold it; one no live host announces,
to any host."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest

from bot.engines import Engines
from bot.fleet.hosts import host_lines
from bot.models import NewTask, TaskKind
from bot.store import EnginePresence, Presence, Store, UsageWindow
from bot.store.db import utcnow
from tests.support.postgres import STORE_KINDS, opened_store

LEASE_S = 30.0  # online for two beats: 10 s after a heartbeat
PREFER_S = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture(params=STORE_KINDS)
async def clocked(request, tmp_path):  # type: ignore[no-untyped-def]
    clock = Clock()
    async with opened_store(request.param, tmp_path, clock) as store:
        yield store, clock


async def beat(
    store: Store,
    clock: Clock,
    host: str,
    *,
    used: float | None = None,
    free: int = 2,
    engines: tuple[str, ...] = ("claude",),
    **projects: str,
) -> None:
    """``host``'s runner (one per host, named as it) announces itself: ``used`` of the
    five-hour window of each of its engines."""
    windows = tuple(
        UsageWindow(e, "five_hour", used, clock.now + timedelta(hours=2), clock.now)
        for e in engines
        if used is not None
    )
    presence = Presence(
        tuple(EnginePresence(e, True, e, True) for e in engines),
        slots=4,
        free=free,
        projects=tuple(projects.items()),
        windows=windows,
    )
    assert await store.runners.beat(host, engines, LEASE_S, presence)


async def submitted(store: Store, prompt: str, cwd: str = "/front", **place: str) -> int:
    new = NewTask(1, 1, place.pop("engine", "claude"), TaskKind.DETACH, prompt, Path(cwd), **place)  # type: ignore[arg-type]
    task, turn = await store.tasks.create(new, prompt)
    assert await store.claims.mark_submitted(turn.id)
    return task.id


async def claimed(
    store: Store,
    host: str,
    engines: tuple[str, ...] = ("claude",),
    prefer_s: float = PREFER_S,
    **projects: str,
) -> str | None:
    got = await store.claims.claim_next(host, engines, host, projects, prefer_s=prefer_s)
    return got[0].slug if got else None


async def test_a_task_goes_to_the_host_with_the_most_plan_left_then_free_slots(clocked):
    store, clock = clocked
    for host in ("alpha", "beta", "gamma", "delta"):
        await store.runners.register(host, host, host, "worker", LEASE_S)
    await beat(store, clock, "alpha", used=0.7, free=3, web="/a/web")  # 30 % of its plan left
    await beat(store, clock, "beta", used=0.2, free=1)  # 80 % left
    await beat(store, clock, "gamma", engines=("codex",), free=1)  # nothing reported: all left
    await beat(store, clock, "delta", engines=("codex",), free=3)
    shown = {h.host: h.windows for h in host_lines(await store.runners.every(), clock.now)}
    assert [(w.engine, w.window, w.used) for w in shown["alpha"]] == [("claude", "five_hour", 0.7)]
    assert shown["gamma"] == ()  # each host its own plan, as /hosts and the board show it

    await submitted(store, "plan")
    assert await claimed(store, "alpha") is None  # beta has more of its plan left
    assert await claimed(store, "beta") == "plan"
    await submitted(store, "beta-busy")  # beta's one free slot is taken: not waited for
    assert await claimed(store, "alpha") == "beta-busy"

    await submitted(store, "slots", engine="codex")  # as much plan left: more free slots win
    assert await claimed(store, "gamma", ("codex",)) is None
    assert await claimed(store, "delta", ("codex",)) == "slots"

    await submitted(store, "web", project="web")  # beta is better but has no web
    await submitted(store, "pinned", host="alpha")  # nor is it alpha
    assert await claimed(store, "alpha", web="/a/web") == "web"
    assert await claimed(store, "alpha") == "pinned"

    await beat(store, clock, "beta", used=0.2, free=0)  # better, but full: no wait for it
    await submitted(store, "full")
    assert await claimed(store, "alpha") == "full"

    await beat(store, clock, "beta", used=0.2, free=1)
    await submitted(store, "grace")
    assert await claimed(store, "alpha") is None
    clock.advance(PREFER_S - 1)
    assert await claimed(store, "alpha") is None
    clock.advance(1.5)  # the grace is over: beta did not claim, alpha takes it
    assert await claimed(store, "alpha") == "grace"

    clock.advance(LEASE_S / 3)  # beta silent past one heartbeat: offline, not waited for
    await beat(store, clock, "alpha", used=0.7, free=3, web="/a/web")
    await submitted(store, "offline")
    assert await claimed(store, "alpha") == "offline"


async def test_a_plain_directory_goes_to_the_hosts_whose_projects_hold_it(clocked):
    store, clock = clocked
    for host in ("alpha", "beta", "gamma"):
        await store.runners.register(host, host, host, "worker", LEASE_S)
    await beat(store, clock, "alpha", web="/a/web")
    await beat(store, clock, "beta", web="/b/web", docs="/b/docs")
    await beat(store, clock, "gamma")

    async def claims(host: str) -> list[str]:
        got = []
        while slug := await claimed(store, host, prefer_s=0):  # where it may go, not who first
            got.append(slug)
        return got

    await submitted(store, "under-docs", "/b/docs/guide")
    await submitted(store, "a-web", "/a/web")
    await submitted(store, "nowhere", "/srv/other")
    await submitted(store, "docs-like", "/b/docsx")  # not under /b/docs
    assert await claims("gamma") == ["nowhere", "docs-like"]  # no host announces these
    assert await claims("alpha") == ["a-web"]
    assert await claims("beta") == ["under-docs"]

    await store.runners.stop("beta")  # the only host with /b/docs is gone: any host
    await submitted(store, "orphan", "/b/docs")
    assert await claims("gamma") == ["orphan"]


def test_a_host_announces_the_windows_its_engines_reported_there():
    """What a turn's engine reports of its plan is this host's (its heartbeat announces it): the
    latest report of each window, none whose reset has come; what it says survives the lease
    row's JSON."""
    engines = Engines({})
    soon = utcnow() + timedelta(hours=1)
    engines.window_reported("claude", "five_hour", 0.3, soon)
    engines.window_reported("claude", "five_hour", 0.6, soon)  # the latest counts
    engines.window_reported("claude", "seven_day", 0.9, utcnow() - timedelta(seconds=1))  # reset
    windows = engines.windows()
    assert [(w.engine, w.window, w.used) for w in windows] == [("claude", "five_hour", 0.6)]
    presence = Presence(slots=2, free=1, windows=windows)
    assert Presence.decode(presence.encode()) == presence
    assert (
        presence.plan_left("claude", utcnow()) == 0.4 and presence.plan_left("codex", utcnow()) == 1
    )
