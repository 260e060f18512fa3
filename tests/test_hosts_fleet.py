"""Picking the machine (issue #57): a front bot and three real `python -m bot worker` processes on
the machine's PostgreSQL, each its own host (DETACH_HOST_NAME) with its own HOME (a Claude
session lives on the machine that ran it), its projects at its own paths (DETACH_PROJECTS) and
its engines: alpha and beta run claude, gamma only codex. Tasks pinned (``host=``, /host), by
project (``cwd=project:x``, /cd project:x; run in that host's directory), by engine and unpinned
land where they should; a task pinned to a host that is down waits, says so with Run elsewhere,
and runs when the host is back (or elsewhere, tapped); a follow-up goes on in its session on the
host that has it, and when that host is gone it says so and a fresh session elsewhere is
offered."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from bot.models import TaskStatus
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked
from tests.support.postgres import postgres_database
from tests.support.workers import Worker, runner_of, wait_until, worker_env
from tests.test_fleet import button

ROOT = Path(__file__).resolve().parents[1]
LEASE_S = 3.0
WAITED_S = 3.0  # longer than a claim's poll (2 s): a turn that could be claimed would be


def host_env(root: Path, projects: dict[str, str], base: dict[str, str]) -> dict[str, str]:
    """A host's own HOME, allowed directories and projects (made here)."""
    (root / "home").mkdir(parents=True)
    pairs = []
    for name, sub in projects.items():
        (root / sub).mkdir(parents=True)
        pairs.append(f"{name}={root / sub}")
    return {**base, "HOME": str(root / "home"), "DETACH_PROJECTS": ",".join(pairs)}


async def host_of(app, task_id: int) -> str:  # type: ignore[no-untyped-def]
    """The host of the task's newest turn (its runner is ``name@host#xxxxxx``)."""
    runner = await runner_of(app.store, task_id) or ""
    return runner.partition("@")[2].partition("#")[0]


async def done(fake: FakeTelegram, text: str, after: int = 0):  # type: ignore[no-untyped-def]
    return await fake.wait_text(OWNER, text, timeout_s=90, after=after)


async def stays_queued(app, task_id: int) -> None:  # type: ignore[no-untyped-def]
    await asyncio.sleep(WAITED_S)
    assert (await app.store.tasks.get(task_id)).status is TaskStatus.QUEUED


@pytest.mark.timeout(360)
async def test_pinned_by_project_by_engine_and_a_follow_up_land_on_the_right_host(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, anthropic, openai, workdir
):
    for mark in ("P", "API", "WEB", "U", "D", "W1", "W2"):
        anthropic.script(f"MARK-{mark}", [{"text": f"answer {mark}"}, {"echo": True}])
    openai.script("MARK-CX", [{"text": "Codex answered."}])
    roots = {h: tmp_path / h for h in ("alpha", "beta", "gamma")}
    async with postgres_database() as url, FakeTelegram() as fake:

        def worker(name: str, host: str, env: dict[str, str]) -> Worker:
            allowed = f"{roots[host]},{workdir}"
            extra = {"DETACH_HOST_NAME": host, "DETACH_ALLOWED_WORKDIRS": allowed, **env}
            extra |= {"DETACH_WORKER_LEASE_S": str(LEASE_S), "PYTHONPATH": str(ROOT)}
            data = roots[host] / "data"
            return Worker(
                name,
                worker_env(agent_env, url, data, claude_bin, workdir, **extra),
                tmp_path / f"{name}.log",
            )

        alpha = worker("wa", "alpha", host_env(roots["alpha"], {"web": "web"}, {}))
        beta = worker("wb", "beta", host_env(roots["beta"], {"web": "w/site", "api": "api"}, {}))
        gamma = worker(
            "wg",
            "gamma",
            host_env(
                roots["gamma"],
                {"docs": "docs"},
                {**codex_env, "DETACH_CODEX_BIN": codex_bin, "DETACH_CLAUDE_BIN": "/nonexistent"},
            ),
        )
        gamma.env["HOME"] = codex_env["HOME"]  # its codex login lives there
        settings = make_settings(
            tmp_path / "front", fake, claude_bin, workdir, role="front", database_url=url
        )
        async with running_bot(settings, agent_env) as app:
            for w in (alpha, beta, gamma):
                await w.start()
            for w in (alpha, beta, gamma):
                await w.ready(90)

            async def all_online() -> bool:
                hosts = {r.host for r in await app.store.runners.every() if r.presence.engines}
                return hosts >= {"alpha", "beta", "gamma"}

            await wait_until(all_online, 30)

            # pinned, by project, by engine, unpinned
            await fake.user_message("/detach host=beta MARK-P go", OWNER)
            await done(fake, "answer P")
            assert await host_of(app, 1) == "beta"
            await fake.user_message("/detach cwd=project:api MARK-API go", OWNER)
            await done(fake, "answer API")
            api = await app.store.tasks.get(2)
            assert await host_of(app, 2) == "beta" and api.cwd == str(roots["beta"] / "api")
            await fake.user_message("/cd project:web", OWNER)  # the chat's directory
            await fake.wait_text(OWNER, "project:web", timeout_s=10)
            await fake.user_message("/detach MARK-WEB go", OWNER)
            await done(fake, "answer WEB")
            web, web_host = await app.store.tasks.get(3), await host_of(app, 3)
            assert web.cwd == str(roots[web_host] / ("web" if web_host == "alpha" else "w/site"))
            await fake.user_message(f"/cd {workdir}", OWNER)
            await fake.wait_text(OWNER, str(workdir), timeout_s=10)
            await fake.user_message("/detach engine=codex mode=ask MARK-CX go", OWNER)
            await done(fake, "Codex answered.")
            assert await host_of(app, 4) == "gamma"
            await fake.user_message("/detach MARK-U go", OWNER)
            card_u = await done(fake, "answer U")
            u_host = await host_of(app, 5)
            assert u_host in ("alpha", "beta")  # gamma has no claude
            # only gamma has docs, and gamma has no claude: nobody may claim it
            await fake.user_message("/detach cwd=project:docs MARK-D go", OWNER)
            await fake.wait_text(OWNER, "MARK-D", timeout_s=10)

            # the chat's default host
            await fake.user_message("/host alpha", OWNER)
            await fake.wait_text(OWNER, "run on <b>alpha</b>", timeout_s=10)
            await fake.user_message("/host nowhere", OWNER)
            await fake.wait_text(OWNER, "No host called", timeout_s=10)
            await fake.user_message("/detach host=alpha cwd=project:api MARK-X go", OWNER)
            await fake.wait_text(OWNER, "No host has a project called <b>api</b>", timeout_s=10)

            # a pinned task waits for its host, or runs elsewhere when asked
            assert await beta.stop() == 0  # offline at once
            await fake.user_message("/host beta", OWNER)
            await fake.wait_text(OWNER, "run on <b>beta</b>", timeout_s=10)
            mark = len(fake.calls)
            await fake.user_message("/detach MARK-W1 go", OWNER)
            ack1 = await fake.wait_text(OWNER, "Pinned to beta, which is offline", after=mark)
            await fake.user_message("/detach MARK-W2 go", OWNER)
            ack2 = await fake.wait_text(OWNER, "MARK-W2", after=mark)
            w1, w2 = await app.store.tasks.get(7), await app.store.tasks.get(8)
            assert w1.host == w2.host == "beta" and "Pinned to beta" in ack2.params["text"]
            await stays_queued(app, w1.id)
            assert (await app.store.tasks.get(w2.id)).status is TaskStatus.QUEUED
            elsewhere = button(ack2, "Run elsewhere")
            await fake.press(OWNER, ack2.result["message_id"], elsewhere, OWNER)
            await done(fake, "answer W2")
            assert await host_of(app, w2.id) == "alpha"  # the only claude host online
            assert (await app.store.tasks.get(w1.id)).status is TaskStatus.QUEUED
            assert button(ack1, "Run elsewhere")
            await beta.start()
            await beta.ready(90)
            await done(fake, "answer W1")
            assert await host_of(app, w1.id) == "beta"  # ran once its host came back
            await fake.user_message("/host any", OWNER)
            await fake.wait_text(OWNER, "any host", timeout_s=10)

            # a follow-up goes on in its session, on the host that has it
            await wait_linked(app, OWNER, card_u.result["message_id"])
            mark = len(fake.calls)
            await fake.user_message(
                "MARK-U and then", OWNER, reply_to_message_id=card_u.result["message_id"]
            )
            again = await fake.wait_text(OWNER, "ECHO roles=", 90, mark)
            assert "assistant" in again.params["text"]  # its conversation went on
            assert await host_of(app, 5) == u_host  # resumed where the session lives
            other = alpha if u_host == "beta" else beta
            gone = beta if u_host == "beta" else alpha
            assert await gone.stop() == 0
            await wait_linked(app, OWNER, again.result["message_id"])
            mark = len(fake.calls)
            await fake.user_message(
                "MARK-U once more", OWNER, reply_to_message_id=again.result["message_id"]
            )
            said = await fake.wait_text(OWNER, f"its session lives on {u_host}", 30, mark)
            await stays_queued(app, 5)
            await fake.press(OWNER, said.result["message_id"], button(said, "Fresh session"), OWNER)
            await done(fake, "answer U", after=mark)  # a new session: its first answer
            assert await host_of(app, 5) == other.env["DETACH_HOST_NAME"]
            assert (await app.store.tasks.get(6)).status is TaskStatus.QUEUED  # docs: still
