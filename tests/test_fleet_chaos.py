"""The scale-out chaos drill: a front bot and three real `python -m bot worker` processes on the
machine's PostgreSQL, the real claude CLI against the scripted model, 40 tasks sent at once; a
random live worker is killed with kill -9 (with its agents: the machine is gone) every 20 s
and restarted 40 s later. The owner presses Resume on every notice as it arrives.

Afterwards: every task is done, once (one completion card each; no turn was run twice: a
resumed task runs a new turn, asked for); every turn a killed worker left was surfaced, naming
that worker, within its lease + 15 s, and its Resume finished on a live worker; no restarted
worker crashed at start; no message still says running, no Resume button is left, no progress
message stays; every worker stops cleanly at the end."""

from __future__ import annotations

import asyncio
import random
import re
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from bot.models import TaskStatus
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, front_settings, make_settings, running_bot
from tests.support.postgres import postgres_database
from tests.support.workers import Worker, wait_until, worker_env
from tests.test_hosts_fleet import host_env, host_of

TASKS = 40
LEASE_S = 10.0
KILL_EVERY_S = 20.0
RESTART_AFTER_S = 40.0
KILLS = 4
ROOT = Path(__file__).resolve().parents[1]
SURFACED_WITHIN_S = LEASE_S + 15
NOTICE = re.compile(r"Worker <b>(w\d)</b>")
MARK = re.compile(r"HC-(\w+)")


class Owner:
    """Presses Resume on every task of every takeover notice, as a person would."""

    def __init__(self, fake: FakeTelegram) -> None:
        self.fake = fake
        self.seen: dict[str, float] = {}  # task label -> when its (first) notice arrived
        self.noticed: list[tuple[str, str, float]] = []  # (worker, label, when)
        self._read = 0

    async def run(self) -> None:
        while True:
            calls = self.fake.calls[self._read :]
            self._read += len(calls)
            for call in calls:
                if call.method == "sendMessage" and call.ok:
                    await self._notice(call)
            await asyncio.sleep(0.2)

    async def _notice(self, call) -> None:  # type: ignore[no-untyped-def]
        match = NOTICE.search(call.params.get("text", ""))
        if match is None:
            return
        for row in call.params["reply_markup"]["inline_keyboard"]:
            resume = row[0]
            label = resume["text"].split(":")[0]
            self.noticed.append((match.group(1), label, call.at))
            self.seen.setdefault(label, call.at)
            await self.fake.press(OWNER, call.result["message_id"], resume["callback_data"], OWNER)


async def turns_of(store, runner_prefix: str) -> list[tuple[int, int, str]]:  # type: ignore[no-untyped-def]
    """(turn id, task id, status) of the turns a runner incarnation holds or held."""
    async with store.engine.connect() as conn:
        rows = await conn.execute(
            sa.text("SELECT id, task_id, status FROM turns WHERE runner LIKE :r"),
            {"r": f"{runner_prefix}#%"},
        )
        return [(r[0], r[1], r[2]) for r in rows]


async def current_runner(store, name: str) -> str:  # type: ignore[no-untyped-def]
    async with store.engine.connect() as conn:
        return str(
            (
                await conn.execute(
                    sa.text(
                        "SELECT id FROM runners WHERE name = :n ORDER BY started_at DESC LIMIT 1"
                    ),
                    {"n": name},
                )
            ).scalar_one()
        )


async def drill(store, workers: list[Worker], rng: random.Random) -> list[tuple[str, str, float]]:  # type: ignore[no-untyped-def]
    """Every 20 s (a tick): kill -9 a random live worker (with its agents), once it said it is
    ready, then start the ones due back; each comes back two ticks (40 s) after its kill,
    counted in ticks: a kill that ran late under load never makes its restart miss its tick
    (all three were once down at the next). Returns (worker, incarnation, when killed)."""
    began = time.monotonic()
    kills: list[tuple[str, str, float]] = []
    restarts: list[tuple[int, Worker]] = []  # (the tick it comes back at, the worker)
    back_after = round(RESTART_AFTER_S / KILL_EVERY_S)
    for k in range(1, KILLS + 1):
        await asyncio.sleep(max(0.0, began + k * KILL_EVERY_S - time.monotonic()))
        victim = rng.choice([w for w in workers if w.alive])
        await victim.ready(90)  # its start said so: each start is counted ready afterwards
        incarnation = await current_runner(store, victim.name)
        await victim.kill_with_agents()
        kills.append((victim.name, incarnation, time.monotonic()))
        for due in [r for r in restarts if r[0] <= k]:
            await due[1].start()  # two ticks after its kill (this tick's victim was up)
            restarts.remove(due)
        restarts.append((k + back_after, victim))
    for tick, worker in sorted(restarts, key=lambda r: r[0]):
        await asyncio.sleep(max(0.0, began + tick * KILL_EVERY_S - time.monotonic()))
        await worker.start()
    return kills


@pytest.mark.timeout(480)
async def test_forty_tasks_while_workers_are_killed_in_turn(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    for n in range(TASKS):
        anthropic.script(
            f"CHAOS{n:02d}",
            [
                {"tool_use": {"name": "Bash", "input": {"command": "sleep 6", "description": "w"}}},
                {"text": f"finished {n:02d}"},
            ],
        )
    async with postgres_database() as url, FakeTelegram(flood_burst=60, flood_per_s=60) as fake:
        extra = {"DETACH_WORKER_LEASE_S": str(LEASE_S), "DETACH_MAX_CONCURRENT_TURNS": "2"}
        workers = [
            Worker(
                name,
                worker_env(agent_env, url, tmp_path / name, claude_bin, workdir, **extra),
                tmp_path / f"{name}.log",
            )
            for name in ("w1", "w2", "w3")
        ]
        settings = front_settings(
            tmp_path,
            fake,
            claude_bin,
            workdir,
            url,
            worker_lease_s=LEASE_S,
            progress_delay_s=2.0,
            progress_interval_s=1.0,
        )
        async with running_bot(settings, agent_env) as app:
            owner = Owner(fake)
            watching = asyncio.create_task(owner.run())
            try:
                for worker in workers:
                    await worker.start()
                for n in range(TASKS):
                    await fake.user_message(f"/claude mode=auto CHAOS{n:02d} chaos", OWNER)
                kills = await drill(app.store, workers, random.Random(20))

                async def all_done() -> bool:
                    tasks = await app.store.tasks.list_for(OWNER, limit=100)
                    return len(tasks) == TASKS and all(t.status is TaskStatus.DONE for t in tasks)

                async with asyncio.timeout(240):
                    while not await all_done():
                        await asyncio.sleep(0.5)
                assert await app.outbox.idle(60)
                await asyncio.sleep(1.0)  # the last edits reach the fake Bot API
                for worker in workers:
                    await worker.ready()  # the last restarts too: none crashed at start
            finally:
                watching.cancel()
                exits = {w.name: await w.stop() if w.alive else None for w in workers}
            async with app.store.engine.connect() as conn:
                turns = [
                    dict(r._mapping)
                    for r in await conn.execute(
                        sa.text("SELECT id, task_id, status, runs, runner FROM turns ORDER BY id")
                    )
                ]
            labels = {t.id: t.label for t in await app.store.tasks.list_for(OWNER, limit=100)}
        logs = {w.name: w.tail(1_000_000) for w in workers}
        chat = fake.messages.get(OWNER, [])
        cards = [
            c.params["text"]
            for c in fake.calls
            if c.method == "sendMessage" and c.ok and "finished " in c.params.get("text", "")
        ]

    check_workers(workers, exits, logs)
    check_turns(turns, labels, cards, kills, owner)
    check_chat(chat)


def check_workers(workers: list[Worker], exits: dict, logs: dict) -> None:  # type: ignore[type-arg]
    """No worker crashed: each was only ever killed by the drill, started cleanly each time,
    and stopped cleanly at the end."""
    for worker in workers:
        assert all(code == -9 for code in worker.exits), (worker.name, worker.exits)
        assert exits[worker.name] == 0, (worker.name, logs[worker.name][-3000:])
        assert logs[worker.name].count(" ready: ") == worker.starts, logs[worker.name][-3000:]
        assert "Traceback" not in logs[worker.name], logs[worker.name][-5000:]


def check_turns(turns: list, labels: dict, cards: list, kills: list, owner: Owner) -> None:  # type: ignore[type-arg]
    """Every task ends once: one card each; no turn ran twice (a resume is a new turn, asked
    for). Every turn a killed worker left was surfaced in time, naming it, and resumed on
    another worker."""
    assert all(t["runs"] == 1 for t in turns), [t for t in turns if t["runs"] != 1]
    for n in range(TASKS):
        assert sum(f"finished {n:02d}" in text for text in cards) == 1, n
    done = [t for t in turns if t["status"] == TaskStatus.DONE.value]
    assert sorted(t["task_id"] for t in done) == sorted(labels)

    lost = [t for t in turns if t["status"] == TaskStatus.INTERRUPTED.value]
    assert lost, "the drill killed no worker while it ran a turn"
    assert all(t["status"] in ("done", "interrupted") for t in turns), turns
    for turn in lost:
        name, _, killed_at = next(k for k in kills if turn["runner"] == k[1])
        label = labels[turn["task_id"]]
        noticed = [when for worker, seen, when in owner.noticed if seen == label and worker == name]
        assert noticed, (label, name, owner.noticed)
        assert min(w for w in noticed if w >= killed_at) - killed_at <= SURFACED_WITHIN_S, label
        resumed = [t for t in turns if t["task_id"] == turn["task_id"] and t["id"] > turn["id"]]
        assert resumed and resumed[-1]["runner"] != turn["runner"], resumed  # a live one


def check_chat(chat: list) -> None:  # type: ignore[type-arg]
    """The chat a person sees: nothing says running, no Resume or Cancel is left, no progress
    message stays."""
    for message in chat:
        text = message.get("text", "")
        assert "· running" not in text and "· queued" not in text, text
        buttons = [
            b["text"]
            for row in (message.get("reply_markup") or {}).get("inline_keyboard", [])
            for b in row
        ]
        assert not any("Resume" in b or "Cancel" in b for b in buttons), (text, buttons)


HOSTS_LEASE_S = 3.0


@pytest.mark.timeout(240)
async def test_hosts_take_what_fits_them_while_one_is_lost_mid_turn(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, anthropic, openai, workdir
):
    """Issue #57's drill: three workers on three hosts, with their projects at their own paths
    and their own engines (alpha and beta claude, gamma only codex); tasks unpinned, pinned, by
    project, by a plain directory one host has and by engine, all sent at once, land where
    they should; alpha is killed with its agents mid-turn, and what it ran is surfaced and
    resumed on beta (the one claude host left), as before."""
    for label in ("U1", "U2", "U3", "U4", "P1", "P2", "W1", "W2", "A1"):
        anthropic.script(
            f"HC-{label}",
            [
                {"tool_use": {"name": "Bash", "input": {"command": "sleep 4", "description": "w"}}},
                {"text": f"finished {label}"},
            ],
        )
    openai.script("HC-CX", [{"text": "finished CX"}])
    roots = {h: tmp_path / h for h in ("alpha", "beta", "gamma")}
    async with postgres_database() as url, FakeTelegram(flood_burst=60, flood_per_s=60) as fake:

        def worker(name: str, host: str, projects: dict[str, str], **env: str) -> Worker:
            extra = {
                "DETACH_HOST_NAME": host,
                "DETACH_ALLOWED_WORKDIRS": f"{roots[host]},{workdir}",
            }
            extra |= {"DETACH_WORKER_LEASE_S": str(HOSTS_LEASE_S), "PYTHONPATH": str(ROOT)}
            extra |= {"DETACH_MAX_CONCURRENT_TURNS": "3", **host_env(roots[host], projects, env)}
            data = roots[host] / "data"
            return Worker(
                name,
                worker_env(agent_env, url, data, claude_bin, workdir, **extra),
                tmp_path / f"{name}.log",
            )

        alpha = worker("w1", "alpha", {"web": "web"})
        beta = worker("w2", "beta", {"web": "w/site", "api": "api"})
        gamma = worker(
            "w3",
            "gamma",
            {"docs": "docs"},
            **codex_env,
            DETACH_CODEX_BIN=codex_bin,
            DETACH_CLAUDE_BIN="/nonexistent",
        )
        gamma.env["HOME"] = codex_env["HOME"]  # its codex login lives there
        (roots["beta"] / "api" / "sub").mkdir()
        settings = make_settings(
            tmp_path / "front",
            fake,
            claude_bin,
            workdir,
            role="front",
            database_url=url,
            worker_lease_s=HOSTS_LEASE_S,
            allowed_workdirs=(workdir, *roots.values()),
        )
        began = time.monotonic()
        async with running_bot(settings, agent_env) as app:
            owner = Owner(fake)
            watching = asyncio.create_task(owner.run())
            workers = (alpha, beta, gamma)
            try:
                for w in workers:
                    await w.start()
                for w in workers:
                    await w.ready(90)

                async def all_online() -> bool:
                    hosts = {r.host for r in await app.store.runners.every() if r.presence.engines}
                    return hosts >= {"alpha", "beta", "gamma"}

                await wait_until(all_online, 30)
                sent = {
                    **{f"U{n}": "" for n in range(1, 5)},
                    "P1": "host=beta",
                    "P2": "host=beta",
                    "W1": "cwd=project:web",
                    "W2": "cwd=project:web",
                    "A1": f"cwd={roots['beta'] / 'api' / 'sub'}",  # a plain path only beta has
                }
                for label, option in sent.items():
                    await fake.user_message(f"/claude mode=auto {option} HC-{label} go", OWNER)
                await fake.user_message("/detach engine=codex mode=ask HC-CX go", OWNER)

                async def alpha_runs() -> bool:
                    return bool(
                        [t for t in await turns_of(app.store, "w1@alpha") if t[2] == "running"]
                    )

                await wait_until(alpha_runs, 60)
                await alpha.kill_with_agents()  # the machine is gone, mid-turn
                killed_at = time.monotonic()

                async def all_done() -> bool:
                    tasks = await app.store.tasks.list_for(OWNER, limit=100)
                    return len(tasks) == 10 and all(t.status is TaskStatus.DONE for t in tasks)

                try:
                    await wait_until(all_done, 120)
                except TimeoutError:  # where each stands, for whoever reads the failure
                    tasks = await app.store.tasks.list_for(OWNER, limit=100)
                    print([(t.title, t.status.value, t.host, t.session_host) for t in tasks])
                    raise
                tasks = await app.store.tasks.list_for(OWNER, limit=100)
                label_of = {t.id: MARK.search(t.title).group(1) for t in tasks}  # type: ignore[union-attr]
                hosts = {label_of[t.id]: (await host_of(app, t.id), t.cwd) for t in tasks}
                left = [t for t in await turns_of(app.store, "w1@alpha") if t[2] == "interrupted"]
            finally:
                watching.cancel()
                exits = [await w.stop() for w in workers if w.alive]
        took_s = time.monotonic() - began

    assert exits == [0, 0]
    check_hosts(hosts, roots)
    assert left, "alpha was killed with no turn running"
    check_lost([label_of[t[1]] for t in left], hosts, owner, killed_at)
    print(f"hosts drill: {took_s:.1f} s; alpha left {len(left)} turns, resumed on beta")


def check_hosts(hosts: dict, roots: dict) -> None:  # type: ignore[type-arg]
    """Each task ran where it fits: pinned on its host, by project in that host's directory,
    a plain directory on the host that has it, codex on the codex host, claude off it."""
    assert hosts["P1"][0] == hosts["P2"][0] == "beta"  # pinned
    assert hosts["A1"] == ("beta", str(roots["beta"] / "api" / "sub"))  # its plain directory
    assert hosts["CX"][0] == "gamma"  # the only codex host
    for label in ("W1", "W2"):  # by project: in the directory of the host that ran it
        host, cwd = hosts[label]
        assert cwd == str(roots[host] / ("web" if host == "alpha" else "w/site")), hosts
    assert all(hosts[f"U{n}"][0] in ("alpha", "beta") for n in range(1, 5))  # gamma: no claude


def check_lost(labels: list[str], hosts: dict, owner: Owner, killed_at: float) -> None:  # type: ignore[type-arg]
    """What alpha ran when it was lost was surfaced naming w1 in time, and resumed on beta."""
    for label in labels:
        noticed = [
            when
            for name, seen, when in owner.noticed
            if name == "w1" and f"hc-{label.lower()}" in seen.lower()
        ]
        assert noticed and min(noticed) - killed_at <= HOSTS_LEASE_S + 15, (label, owner.noticed)
        assert hosts[label][0] == "beta", (label, hosts)
