"""Hosts (issue #57, first part): a front bot and two real `python -m bot worker` processes on
the machine's PostgreSQL, each its own host (DETACH_HOST_NAME) with its own projects
(DETACH_PROJECTS). /hosts shows both, with what their heartbeats announced, within one
heartbeat of their start; a task's card and the board name the host that ran it (two hosts
are known); a worker stopped shows as offline at once, one killed within one heartbeat."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from bot.board.views import BoardData
from bot.fleet.hosts import HostLine, host_lines
from bot.fleet.status import FleetStatus
from bot.models import NewTask, TaskKind, TaskStatus, Turn
from bot.store import EnginePresence, Presence, Runner, TurnOutcome, UsageWindow
from bot.store.db import utcnow
from bot.tasks.reads import TaskReads
from bot.telegram.texts import Texts
from handlers.hosts import hosts_text
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.postgres import STORE_KINDS, opened_store, postgres_database
from tests.support.workers import Worker, worker_env

ROOT = Path(__file__).resolve().parents[1]
LEASE_S = 3.0  # a heartbeat every half second
BEAT_S = LEASE_S / 6


async def hosts_now(fake: FakeTelegram) -> str:
    after = len(fake.calls)
    await fake.user_message("/hosts", OWNER)
    return str((await fake.wait_text(OWNER, "Hosts", timeout_s=10, after=after)).params["text"])


async def hosts(app) -> list[HostLine]:  # type: ignore[no-untyped-def]
    """What /hosts would show now."""
    return host_lines(await app.store.runners.every(), utcnow())


def block(text: str, host: str) -> str:
    """The lines /hosts gives ``host`` (up to the next blank line)."""
    start = text.index(f"<b>{host}</b>")
    end = text.find("\n\n", start)
    return text[start : end if end >= 0 else len(text)]


async def test_hosts_show_presence_projects_and_the_host_on_the_card(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-H1", [{"text": "answered on a host"}])
    web, api = tmp_path / "web", tmp_path / "api"
    async with postgres_database() as url, FakeTelegram() as fake:
        # this checkout's code in the workers, wherever the venv's `bot` points
        env = {"DETACH_WORKER_LEASE_S": str(LEASE_S), "PYTHONPATH": str(ROOT)}
        workers = [
            Worker(
                name,
                worker_env(
                    agent_env,
                    url,
                    tmp_path / name,
                    claude_bin,
                    workdir,
                    DETACH_HOST_NAME=host,
                    DETACH_PROJECTS=projects,
                    **env,
                ),
                tmp_path / f"{name}.log",
            )
            for name, host, projects in (
                ("w1", "alpha", f"web={web}"),
                ("w2", "beta", f"api={api},docs={workdir}"),
            )
        ]
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, role="front", database_url=url
        )
        async with running_bot(settings, agent_env) as app:
            for worker in workers:
                await worker.start()
            for worker in workers:
                await worker.ready(60)
            ready = time.monotonic()
            # what each announced is there by its next heartbeat (plus one of slack)
            async with asyncio.timeout(2 * BEAT_S + 1):
                while not all(h.online and h.engines for h in await hosts(app)):
                    await asyncio.sleep(0.05)
            shown_s = time.monotonic() - ready
            text = await hosts_now(fake)
            alpha, beta = block(text, "alpha"), block(text, "beta")
            assert "🟢" in text.split("<b>alpha</b>")[0].splitlines()[-1]
            assert "w1" in alpha and "claude" in alpha and "0/2 slots" in alpha
            assert f"<b>web</b> <code>{web}</code>" in alpha and "api" not in alpha
            assert f"<b>api</b> <code>{api}</code>" in beta and "<b>docs</b>" in beta
            assert "w2" in beta and "claude" in beta

            await fake.user_message("/detach MARK-H1 go", OWNER)
            done = await fake.wait_text(OWNER, "answered on a host", timeout_s=90)
            ran = (await app.store.ran.hosts([1]))[1]
            assert ran in ("alpha", "beta")
            assert f"📍 ran on {ran}" in done.params["text"]  # two hosts known: the card names it
            board = BoardData(TaskReads(app.store), app.core.texts, app.core.worktrees)
            assert [row["host"] for row in await board.tasks(OWNER, False)] == [ran]
            fleet = FleetStatus(app.store, LEASE_S, shared=True)
            listed = (await replace(board, fleet=fleet).hosts(OWNER))["hosts"]  # /api/hosts
            assert [(h["host"], h["online"]) for h in listed] == [("alpha", True), ("beta", True)]
            assert {"name": "web", "path": str(web)} in listed[0]["projects"]

            assert await workers[1].stop() == 0  # a clean stop: offline at once
            text = await hosts_now(fake)
            assert "⚫ <b>beta</b> · offline" in text and "🟢 <b>alpha</b>" in text
            assert "<b>api</b>" in block(text, "beta")  # what it had, still shown

            await workers[0].kill_with_agents()  # lost: offline within one heartbeat
            lost = time.monotonic()
            async with asyncio.timeout(2 * BEAT_S + 1):
                while any(h.online for h in await hosts(app)):
                    await asyncio.sleep(0.05)
            offline_s = time.monotonic() - lost
            assert "⚫ <b>alpha</b> · offline" in await hosts_now(fake)
        print(f"presence shown {shown_s:.2f}s after ready; lost host offline in {offline_s:.2f}s")


def test_a_host_is_online_within_one_heartbeat_and_its_runners_add_up():
    """Pure: two runners of one host add their slots and projects; a runner silent past one
    heartbeat, or stopped, is offline; the front is no host; the newest incarnation counts."""
    now = utcnow()

    def runner(name, host, role="worker", silent_s=0.0, stopped=False, started_s=60.0, **p):  # type: ignore[no-untyped-def]
        beat = now - timedelta(seconds=silent_s)
        return Runner(
            id=f"{name}@{host}#{int(started_s)}",
            name=name,
            host=host,
            role=role,
            engines=("claude",),
            started_at=now - timedelta(seconds=started_s),
            heartbeat_at=beat,
            expires_at=beat + timedelta(seconds=LEASE_S),
            stopped_at=now if stopped else None,
            running=p.pop("running", 0),
            presence=Presence(
                (EnginePresence("claude", True, "claude 2.1", True),), slots=2, free=2, **p
            ),
        )

    lines = host_lines(
        [
            runner("w1", "a", projects=(("web", "/w"),), running=1),
            runner("w2", "a", silent_s=BEAT_S * 1.5, projects=(("api", "/a"),)),
            runner("w1", "b", silent_s=BEAT_S * 2.5),  # newest of b, silent too long
            runner("w1", "b", started_s=600.0),  # an older incarnation: not counted
            runner("w1", "c", stopped=True),
            runner("bot", "front-host", role="front"),
        ],
        now,
    )
    assert [(h.host, h.online) for h in lines] == [("a", True), ("b", False), ("c", False)]
    a = lines[0]
    assert a.slots == 4 and a.running == 1 and a.runners == ("w1", "w2")
    assert a.projects == (("api", "/a"), ("web", "/w"))


@pytest.fixture(params=STORE_KINDS)
async def store(request, tmp_path):  # type: ignore[no-untyped-def]
    async with opened_store(request.param, tmp_path) as opened:
        yield opened


def task(prompt: str, engine: str = "claude", **place: str) -> NewTask:
    return NewTask(1, 1, engine, TaskKind.DETACH, prompt, Path("/front/path"), **place)  # type: ignore[arg-type]


async def test_a_host_claims_only_what_fits_it_pinned_by_project_and_by_session(store):
    """The claim query is the router: a pinned turn goes to its host only; a project's to a
    host that has it, in that host's directory; an engine a host lacks stays; a follow-up
    goes where its session lives, anywhere once the owner asked for a fresh session."""
    for runner, host in (("a", "alpha"), ("b", "beta"), ("c", "gamma")):
        await store.runners.register(runner, runner, host, "worker", 30)
    made = {}
    for name, new in {
        "pinned": task("p", host="beta"),
        "web": task("w", project="web"),
        "codex": task("x", engine="codex"),
        "free": task("f"),
    }.items():
        made[name], turn = await store.tasks.create(new, name)
        await store.claims.mark_submitted(turn.id)

    ran: dict[str, Turn] = {}

    async def claims(runner: str, host: str, engines=("claude",), **projects: str) -> list[str]:  # type: ignore[no-untyped-def]
        got = []
        while c := await store.claims.claim_next(runner, engines, host, projects):
            got.append(c[0].slug)
            ran[c[0].slug] = c[1]
            if c[0].project:
                assert c[0].cwd == projects[c[0].project]  # this host's directory
            assert c[0].session_host == host
        return got

    assert await claims("a", "alpha") == ["free"]  # not pinned elsewhere, no project, no codex
    assert await claims("c", "gamma", ("claude", "codex"), web="/g/web") == ["web", "codex"]
    assert await claims("b", "beta") == ["pinned"]

    free = made["free"].id  # its session lives on alpha: a follow-up goes there only
    await store.tasks.finish_turn(ran["free"], TurnOutcome(TaskStatus.DONE), "a")
    await store.tasks.set_session(free, "sess-1")
    follow = await store.tasks.add_turn(free, "and then")
    await store.claims.mark_submitted(follow.id)
    assert await claims("b", "beta") == [] and await claims("a", "alpha") == ["free"]
    await store.tasks.finish_turn(ran["free"], TurnOutcome(TaskStatus.DONE), "a")
    follow = await store.tasks.add_turn(free, "once more")
    await store.claims.mark_submitted(follow.id)
    assert await claims("b", "beta") == []
    assert await store.tasks.unpin(free, fresh=True)  # alpha is gone: a fresh session elsewhere
    assert (await store.tasks.get(free)).session_id is None
    assert await claims("b", "beta") == ["free"]
    assert not await store.tasks.unpin(free, fresh=True)  # it runs: nothing to unpin


def test_hosts_lists_slots_in_use_projects_and_the_usage_windows_of_its_engines():
    now = utcnow()
    claude = EnginePresence("claude", True, "claude 2.1", True)
    window = UsageWindow("claude", "five_hour", 0.4, None, now)
    line = HostLine("alpha", True, now, 60.0, ("w1",), (claude,), 2, 1, (("web", "/w"),), (window,))
    text = hosts_text(Texts(), "en", [line])
    assert "1/2 slots in use" in text and "<b>web</b> <code>/w</code>" in text
    assert "usage: claude five-hour 40 %" in text
    assert "usage" not in hosts_text(Texts(), "en", [replace(line, windows=())])


async def test_a_lost_host_lets_an_unpinned_task_move_and_keeps_a_pinned_one(store):
    """Takeover as today: the interrupted unpinned task's next turn may go anywhere (its
    session's host is forgotten); a pinned one stays with its host."""
    await store.runners.register("a", "a", "alpha", "worker", 30)
    for name, new in {"free": task("f"), "pinned": task("p", host="alpha")}.items():
        created, turn = await store.tasks.create(new, name)
        await store.claims.mark_submitted(turn.id)
        assert await store.claims.claim_next("a", ["claude"], "alpha", {})
        await store.tasks.set_session(created.id, f"sess-{name}")
    interrupted, _, _ = await store.recovery.interrupt_runners(["a"])
    hosts = {t.slug: (t.session_host, t.session_id) for t in interrupted}
    assert hosts == {"free": (None, "sess-free"), "pinned": ("alpha", "sess-pinned")}
