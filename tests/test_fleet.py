"""Scale-out that survives losing a machine: a front bot and real `python -m bot worker`
processes on the machine's PostgreSQL, the real claude CLI against the scripted model.

- A worker killed with its agents: an Allow tapped for its turn, and a /cancel of another
  worker's turn, are settled at once (the front takes the dead runners' turns over: the tap is
  answered, the task offered for Resume, the cancel done) even before any sweep; /status marks
  them lost; Resume runs the turn on a live worker.
- A worker cut off (SIGSTOP) past its lease: the front takes its turn over and says so naming
  the worker; when it comes back it finds its turn taken, stops the agent and writes nothing,
  and goes on as a new incarnation that runs new turns.
- A worker restarted before its lease lapsed takes its earlier run's turns over at start.
- A follow-up claimed by a worker on another machine (another HOME: no conversation of the
  task there) goes on in a new session that is told what happened so far, and says so.
"""

from __future__ import annotations

import asyncio
import socket

import sqlalchemy as sa

from bot.core import process_tag, stable_identity
from bot.models import ProcessRole, TaskStatus
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, front_settings, make_settings, running_bot
from tests.support.postgres import postgres_database
from tests.support.workers import Worker, agents_of, runner_of, wait_until, worker_env

HOST = socket.gethostname()


def sleeper(seconds: int) -> list[dict]:  # type: ignore[type-arg]
    return [
        {
            "tool_use": {
                "name": "Bash",
                "input": {"command": f"sleep {seconds}", "description": "wait"},
            }
        },
        {"text": "slept"},
    ]


def button(call, caption: str) -> str:  # type: ignore[no-untyped-def]
    for row in call.params["reply_markup"]["inline_keyboard"]:
        for b in row:
            if caption in b["text"]:
                return str(b["callback_data"])
    raise AssertionError(f"no {caption!r} button in {call.params['reply_markup']}")


async def status_of(app, task_id: int) -> TaskStatus | None:  # type: ignore[no-untyped-def]
    task = await app.store.tasks.get(task_id)
    return task.status if task else None


async def test_a_tap_and_a_cancel_for_lost_workers_are_settled_at_once(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-F1",
        [
            {
                "tool_use": {
                    "name": "Bash",
                    "input": {"command": "touch approved.txt", "description": "create"},
                }
            },
            {"text": "created it"},
        ],
    )
    anthropic.script("MARK-F2", sleeper(120))
    async with postgres_database() as url, FakeTelegram() as fake:
        env = {"DETACH_WORKER_LEASE_S": "3", "DETACH_MAX_CONCURRENT_TURNS": "1"}
        workers = {
            n: Worker(
                n,
                worker_env(agent_env, url, tmp_path / n, claude_bin, workdir, **env),
                tmp_path / f"{n}.log",
            )
            for n in ("w1", "w2", "w3")
        }
        # the front's own lease is long: it never sweeps in this test, so what settles the
        # lost turns is the tap and the /cancel themselves
        settings = front_settings(
            tmp_path,
            fake,
            claude_bin,
            workdir,
            url,
            worker_lease_s=600,
        )
        async with running_bot(settings, agent_env) as app:
            try:
                await workers["w1"].start()
                await fake.user_message("/claude MARK-F1 make the file", OWNER)
                ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
                assert (await runner_of(app.store, 1) or "").startswith(f"w1@{HOST}#")
                await workers["w2"].start()
                await fake.user_message("/claude mode=auto MARK-F2 wait", OWNER)
                await wait_until(lambda: _running(app, 2), 60)
                assert (await runner_of(app.store, 2) or "").startswith(f"w2@{HOST}#")
                await fake.user_message("/status", OWNER)
                status = await fake.wait_text(OWNER, "Runners", timeout_s=10)
                assert "🟢 <b>w1</b>" in status.params["text"]
                assert "🟢 <b>w2</b>" in status.params["text"]

                await workers["w1"].kill_with_agents()
                await workers["w2"].kill_with_agents()
                await asyncio.sleep(4)  # both leases (3 s) lapse; nobody has swept

                allow = button(ask, "Allow")
                query = await fake.press(OWNER, ask.result["message_id"], allow, OWNER)
                await wait_until(lambda: _answered(fake, query), 10)
                assert "stopped answering" in fake.callback_answers[query]["text"]
                notice = await fake.wait_text(OWNER, "Worker <b>w1</b>", timeout_s=10)
                assert f"on {HOST}" in notice.params["text"]
                assert "#1" in notice.params["text"] and "#2" not in notice.params["text"]
                approval = fake.find_message(OWNER, ask.result["message_id"])
                assert "stopped answering" in approval["text"] and "reply_markup" not in approval
                assert await status_of(app, 1) is TaskStatus.INTERRUPTED
                assert not (workdir / "approved.txt").exists()  # the tap ran nothing

                await fake.user_message("/cancel 2", OWNER)
                await wait_until(lambda: _is(app, 2, TaskStatus.CANCELLED), 10)
                await fake.wait_shown(OWNER, "#2 mark-f2-wait</b> · cancelled", timeout_s=10)
                await fake.user_message("/status", OWNER)
                status = await fake.wait_text(OWNER, "lost", timeout_s=10, after=len(fake.calls))
                assert "🔴 <b>w1</b>" in status.params["text"]

                await workers["w3"].start()
                await fake.press(
                    OWNER, notice.result["message_id"], button(notice, "Resume"), OWNER
                )
                # the resumed session goes on from where the lost worker left it
                done = await fake.wait_text(OWNER, "created it", timeout_s=60)
                assert "#1 " in done.params["text"] and "done" in done.params["text"]
                assert (await runner_of(app.store, 1) or "").startswith(f"w3@{HOST}#")
            finally:
                for worker in workers.values():
                    if worker.alive:
                        await worker.stop()
        assert workers["w3"].proc is not None and workers["w3"].proc.returncode == 0, workers[
            "w3"
        ].tail()


async def test_a_worker_cut_off_past_its_lease_finds_its_turn_taken_and_leaves_it(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-C1", sleeper(60))
    anthropic.script("MARK-C2", [{"text": "after coming back"}])
    async with postgres_database() as url, FakeTelegram() as fake:
        lease = {"DETACH_WORKER_LEASE_S": "3"}
        worker = Worker(
            "w1",
            worker_env(agent_env, url, tmp_path / "w1", claude_bin, workdir, **lease),
            tmp_path / "w1.log",
        )
        settings = front_settings(
            tmp_path,
            fake,
            claude_bin,
            workdir,
            url,
            worker_lease_s=3,
        )
        async with running_bot(settings, agent_env) as app:
            try:
                await worker.start()
                await fake.user_message("/claude mode=auto MARK-C1 wait", OWNER)
                await bash_started(anthropic, "MARK-C1")
                first_runner = await runner_of(app.store, 1)
                turn_id = await _turn(app, 1)
                identity = stable_identity(ProcessRole.WORKER, "w1", HOST)
                tag = f"{process_tag(settings, identity)}:{turn_id}"
                assert agents_of(tag), "the agent runs"

                worker.pause()
                notice = await fake.wait_text(OWNER, "Worker <b>w1</b>", timeout_s=20)
                assert "stopped answering" in notice.params["text"]
                assert await status_of(app, 1) is TaskStatus.INTERRUPTED
                calls_before = len(fake.calls)
                worker.resume()

                async def agent_gone() -> bool:
                    return not agents_of(tag)

                await wait_until(agent_gone, 20)  # it found its turn taken and stopped it
                await fake.user_message("/claude MARK-C2 are you back", OWNER)
                await fake.wait_text(OWNER, "after coming back", timeout_s=60)
                second_runner = await runner_of(app.store, 2)
                assert second_runner != first_runner and (second_runner or "").startswith(
                    f"w1@{HOST}#"
                )  # a new incarnation of the same worker
                assert await status_of(app, 1) is TaskStatus.INTERRUPTED  # left alone
                cards = [
                    c
                    for c in fake.calls[calls_before:]
                    if c.method == "sendMessage" and "#1 " in c.params.get("text", "")
                ]
                assert cards == [], [c.params["text"] for c in cards]
                assert worker.alive, worker.tail()
            finally:
                await worker.stop()
        assert worker.proc is not None and worker.proc.returncode == 0, worker.tail()


async def test_a_worker_restarted_before_its_lease_lapsed_takes_its_turns_over_at_start(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-R1", sleeper(60))
    async with postgres_database() as url, FakeTelegram() as fake:
        worker = Worker(
            "w1",
            worker_env(agent_env, url, tmp_path / "w1", claude_bin, workdir),
            tmp_path / "w1.log",
        )  # the default lease: 30 s
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, role="front", database_url=url
        )
        async with running_bot(settings, agent_env) as app:
            try:
                await worker.start()
                await fake.user_message("/claude mode=auto MARK-R1 wait", OWNER)
                await bash_started(anthropic, "MARK-R1")
                await worker.kill_with_agents()
                await worker.start()
                notice = await fake.wait_text(OWNER, "Worker <b>w1</b>", timeout_s=20)
                assert "#1" in notice.params["text"]
                assert await status_of(app, 1) is TaskStatus.INTERRUPTED
            finally:
                await worker.stop()
        assert worker.exits == [-9] and worker.proc is not None
        assert worker.proc.returncode == 0, worker.tail()


async def test_a_follow_up_on_a_machine_without_the_session_goes_on_in_a_new_one(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-S1", [{"echo": True}])  # says which messages the model was given
    async with postgres_database() as url, FakeTelegram() as fake:
        machines = {}
        for name in ("w1", "w2"):
            home = tmp_path / f"home-{name}"  # each machine its own ~/.claude
            home.mkdir()
            machines[name] = Worker(
                name,
                worker_env(agent_env, url, tmp_path / name, claude_bin, workdir, HOME=str(home)),
                tmp_path / f"{name}.log",
            )
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, role="front", database_url=url
        )
        async with running_bot(settings, agent_env) as app:
            try:
                await machines["w1"].start()
                await fake.user_message("/claude MARK-S1 remember the number 41", OWNER)
                first = await fake.wait_text(OWNER, "ECHO roles=", timeout_s=60)
                await machines["w1"].stop()
                await machines["w2"].start()
                await fake.user_message(
                    "and add one", OWNER, reply_to_message_id=first.result["message_id"]
                )
                said = await fake.wait_text(OWNER, "could not be resumed here", timeout_s=60)
                assert "#1 " in said.params["text"]
                second = await fake.wait_text(OWNER, "and add one", timeout_s=60)
                roles = second.params["text"].split("ECHO roles=")[1].split()[0]
                assert "assistant" not in roles, roles  # a new session: no earlier answer
                assert (await runner_of(app.store, 1) or "").startswith(f"w2@{HOST}#")
                asked = anthropic.requests_for("could not be resumed")
                assert asked and "remember the number 41" in asked[-1]["first_user_text"]
                assert "and add one" in asked[-1]["first_user_text"]
                task = await app.store.tasks.get(1)
                assert task is not None and task.status is TaskStatus.DONE
                assert task.session_id  # the new session, resumable on w2 from now on
            finally:
                for worker in machines.values():
                    if worker.alive:
                        await worker.stop()


async def _running(app, task_id: int) -> bool:  # type: ignore[no-untyped-def]
    return await status_of(app, task_id) is TaskStatus.RUNNING


async def _is(app, task_id: int, status: TaskStatus) -> bool:  # type: ignore[no-untyped-def]
    return await status_of(app, task_id) is status


async def _answered(fake: FakeTelegram, query: str) -> bool:
    return query in fake.callback_answers


async def bash_started(anthropic, mark: str, timeout_s: float = 60) -> None:  # type: ignore[no-untyped-def]
    """The model answered the turn's first request with its Bash call; the tool runs then."""

    async def asked() -> bool:
        return len(anthropic.requests_for(mark)) >= 1

    await wait_until(asked, timeout_s)
    await asyncio.sleep(1.5)


async def _turn(app, task_id: int) -> int:  # type: ignore[no-untyped-def]
    async with app.store.engine.connect() as conn:
        return int(
            (
                await conn.execute(
                    sa.text("SELECT id FROM turns WHERE task_id = :t ORDER BY seq DESC LIMIT 1"),
                    {"t": task_id},
                )
            ).scalar_one()
        )
