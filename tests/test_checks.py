"""Done means checked: the check after a turn, its rounds, its card, its cancel, its defaults
(``check=``, task files, ``.detach.toml``), and sandboxed mode's defaults and fallback. The fast
tier: the real bot and check runner, an engine that replays a recorded stream."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path

import psutil
import pytest

from bot.events import SessionStarted, TurnFinished, Usage
from bot.models import ApprovalMode, TaskStatus, TurnSpec
from bot.settings import Settings
from bot.tasks.export import export
from bot.telegram.render import usd
from bot.telegram.texts import Texts
from executors import sandbox
from executors.check import ShellCheck
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import TOKEN
from tests.support.harness import app_in_own_task, wait_sent
from tests.support.machine import empty_repository
from tests.support.recording_session import RecordingSession
from tests.test_handlers import OWNER, feed, message

SESSION = "0f0e0d0c-0b0a-4908-8706-050403020100"


def finished(text: str, cost: float = 0.01) -> tuple:
    return (
        SessionStarted(SESSION, "fake-model"),
        TurnFinished(
            is_error=False,
            result_text=text,
            session_id=SESSION,
            cost_usd=cost,
            usage=Usage(input_tokens=10, output_tokens=5),
        ),
    )


def settings(tmp_path: Path, workdir: Path, **overrides: object) -> Settings:
    values: dict[str, object] = dict(
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER}),
        data_dir=tmp_path / "data",
        workdir=workdir,
        outbox_chat_interval_s=0,
    )
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


async def until_status(app, task_id: int, *statuses: TaskStatus, timeout_s: float = 20):  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while (task := await app.store.tasks.get(task_id)) is None or task.status not in statuses:
            await asyncio.sleep(0.02)
    return task


def fixing_engine(workdir: Path, fixed_in_round: int) -> FakeEngine:
    """An agent that leaves a failing check.sh and fixes it in round ``fixed_in_round``."""

    def script(spec: TurnSpec) -> tuple:
        round_ = len(engine.specs)
        body = "echo ALL-GOOD" if round_ >= fixed_in_round else f"echo FAILING-{round_}; exit 3"
        (spec.cwd / "check.sh").write_text(body + "\n")
        return finished(f"round {round_} answer")

    engine = FakeEngine(script)
    return engine


async def test_a_failing_check_goes_back_to_the_agent_and_round_two_passes(tmp_path, workdir):
    engine = fixing_engine(workdir, fixed_in_round=2)
    async with app_in_own_task(
        settings(tmp_path, workdir), session=RecordingSession(), executors={"claude": engine}
    ) as app:
        session = await feed(app, message('/claude check="sh check.sh" make the checks pass'))
        ack = session.new_texts()
        assert "check: <code>sh check.sh</code>" in ack
        card = await wait_sent(session, lambda c: "check passed" in c.text, 20)
        assert "round 2" in card.text and "round 2 answer" in card.text
        retrying = [c.text for c in session.sent() if "went back to the agent" in c.text]
        assert len(retrying) == 1 and "FAILING-1" in retrying[0] and "round 1 of 2" in retrying[0]
        task = await until_status(app, 1, TaskStatus.DONE)
        assert [s.prompt.startswith("The check `sh check.sh` failed") for s in engine.specs] == [
            False,
            True,
        ]
        assert "FAILING-1" in engine.specs[1].prompt and engine.specs[1].resume_session_id
        assert task.total_cost_usd == pytest.approx(0.02)  # both rounds are spent
        check = await app.store.checks.last(1)
        assert check.passed and check.round == 2 and "ALL-GOOD" in check.output
        cards = [c for c in session.sent() if "#1" in c.text and "· done ·" in c.text]
        assert len(cards) == 1  # the first round sends one line, not a card


async def test_a_check_that_keeps_failing_ends_in_its_own_status(tmp_path, workdir):
    engine = fixing_engine(workdir, fixed_in_round=99)
    async with app_in_own_task(
        settings(tmp_path, workdir, check_rounds=2),
        session=RecordingSession(),
        executors={"claude": engine},
    ) as app:
        session = await feed(app, message('/claude check="sh check.sh" try'))
        card = await wait_sent(session, lambda c: "check failed" in c.text, 20)
        assert "exit 3" in card.text and "FAILING-2" in card.text and "round 2" in card.text
        task = await until_status(app, 1, TaskStatus.CHECK_FAILED)
        assert len(engine.specs) == 2
        async with asyncio.timeout(10):
            while not (docs := session.sent("SendDocument")):
                await asyncio.sleep(0.05)
        assert "check-round2" in docs[0].document.filename
        assert task.status is TaskStatus.CHECK_FAILED
        assert "check failed after 2 rounds" in card.text
        assert f"${usd(task.total_cost_usd)}" in card.text  # both rounds' cost, not the last's
        assert task.total_cost_usd > (await app.store.tasks.last_turn(1)).cost_usd
        session = await feed(app, message("/tasks"))
        assert "check failed" in session.new_texts()
        exported = await export(app.store, 1, Texts())  # the inbox's done/ file, /export
        assert "check: sh check.sh" in exported
        assert "status: check_failed\ncheck_status: failed\ncheck_round: 2" in exported


async def test_cancel_stops_a_running_check_and_its_processes(tmp_path, workdir):
    marker = f"{uuid.uuid4().int % 1000}.{uuid.uuid4().int % 100}"
    engine = FakeEngine(finished("done quickly"))
    async with app_in_own_task(
        settings(tmp_path, workdir), session=RecordingSession(), executors={"claude": engine}
    ) as app:
        await feed(app, message(f'/claude check="sleep {marker}; sleep {marker}" go'))
        async with asyncio.timeout(15):
            while not _procs(f"sleep {marker}"):
                await asyncio.sleep(0.05)
        started = time.monotonic()
        session = await feed(app, message("/cancel 1"))
        task = await until_status(app, 1, TaskStatus.CANCELLED, timeout_s=15)
        assert time.monotonic() - started < 10 and task.status is TaskStatus.CANCELLED
        assert "cancel" in session.new_texts().lower()
    assert _procs(f"sleep {marker}") == []


def _procs(needle: str) -> list[int]:
    return [
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if needle in " ".join(p.info["cmdline"] or [])
    ]


async def test_check_defaults_come_from_the_repository_and_check_no_turns_them_off(
    tmp_path, workdir
):
    subprocess.run(["git", "init", "-q", str(workdir)], check=True)
    (workdir / ".detach.toml").write_text('check = "make test"  # the suite\n')
    engine = FakeEngine(finished("ok"))
    async with app_in_own_task(
        settings(tmp_path, workdir), session=RecordingSession(), executors={"claude": engine}
    ) as app:
        await feed(app, message("/claude mode=readonly look"))
        await feed(app, message("/claude check=no mode=readonly look again"))
        await feed(app, message("/claude check=“ruff check .” mode=readonly once more"))
        checks = [(await app.store.tasks.get(i)).check for i in (1, 2, 3)]
        assert checks == ["make test", None, "ruff check ."]
        (workdir / ".detach.toml").write_text("check = [")
        session = await feed(app, message("/claude mode=readonly broken"))
        assert ".detach.toml" in session.new_texts()
        assert await app.store.tasks.get(4) is None


async def test_detach_is_sandboxed_by_default_and_says_so_where_it_cannot_be(tmp_path, workdir):
    empty_repository(workdir)
    works = FakeEngine(finished("ok"))
    lacks = FakeEngine(finished("ok"), engine="codex", sandbox_problem="bwrap not installed")
    async with app_in_own_task(
        settings(tmp_path, workdir),
        session=RecordingSession(),
        executors={"claude": works, "codex": lacks},
    ) as app:
        session = await feed(app, message("/detach tidy up"))
        assert "sandboxed" in session.new_texts()
        task = await app.store.tasks.get(1)
        assert task.approval_mode is ApprovalMode.SANDBOX
        assert Path(task.cwd).is_relative_to(tmp_path / "data" / "worktrees")  # its own branch

        session = await feed(app, message("/claude tidy up"))  # sessions keep asking
        assert (await app.store.tasks.get(2)).approval_mode is ApprovalMode.ASK

        session = await feed(app, message("/detach engine=codex tidy up"))
        assert "No sandbox on this machine (bwrap not installed)" in session.new_texts()
        task = await app.store.tasks.get(3)
        assert task.approval_mode is ApprovalMode.ASK and task.cwd == str(workdir)

        session = await feed(app, message("/detach mode=sandbox worktree=no tidy"))
        task = await app.store.tasks.get(4)
        assert task.approval_mode is ApprovalMode.SANDBOX and task.cwd == str(workdir)


async def test_a_sandboxed_check_can_write_only_in_its_directory(tmp_path, workdir):
    assert sandbox.problem({"PATH": "/usr/local/bin:/usr/bin:/bin"}) is None
    outside = Path(f"/var/tmp/outside-{uuid.uuid4().hex[:10]}")  # root could write it, but
    beside = workdir.parent / "beside.txt"  # /tmp is the sandbox's own, thrown away after
    checks = ShellCheck({"PATH": "/usr/local/bin:/usr/bin:/bin"}, (), timeout_s=30)
    command = f"echo in > here.txt && touch {outside}; echo rc=$?; touch {beside}"
    result = await checks.run(command, workdir, sandboxed=True, round_=1)
    assert (workdir / "here.txt").read_text() == "in\n"
    assert not outside.exists() and not beside.exists()
    assert "rc=1" in result.output and "Read-only" in result.output
    assert result.passed
    plain = await checks.run("exit 4", workdir, sandboxed=False, round_=2)
    assert (plain.passed, plain.exit_code, plain.round) == (False, 4, 2)
    slow = await ShellCheck({"PATH": "/usr/bin:/bin"}, (), timeout_s=0.5).run(
        "sleep 30", workdir, sandboxed=False, round_=1
    )
    assert slow.timed_out and not slow.passed and slow.duration_s < 10
    niced = ShellCheck({"PATH": "/usr/bin:/bin"}, (), timeout_s=30, nice=5)
    for sandboxed in (False, True):  # the check runs as nice as the agent, inside or out
        read = await niced.run("cut -d' ' -f19 /proc/$$/stat", workdir, sandboxed, round_=1)
        assert read.output.strip() == "5"


@pytest.mark.parametrize("sandboxed", [False, True])
async def test_a_check_that_leaves_a_daemon_leaves_nothing_running(workdir, sandboxed):
    marker = f"{uuid.uuid4().int % 1000}.{uuid.uuid4().int % 1000}"
    checks = ShellCheck({"PATH": "/usr/local/bin:/usr/bin:/bin"}, (), timeout_s=30)
    result = await checks.run(
        f"(setsid sleep {marker} > /dev/null 2>&1 &); head -c 3000000 /dev/zero | tr '\\0' x",
        workdir,
        sandboxed=sandboxed,
        round_=1,
        tag=f"check-test-{marker}",
    )
    assert result.passed and len(result.output) == 256 * 1024  # garbage is capped, kept
    async with asyncio.timeout(10):  # the tagged sweep runs in the background
        while _procs(f"sleep {marker}"):
            await asyncio.sleep(0.05)


async def test_a_sandboxed_turn_is_told_what_it_may_not_read(tmp_path, workdir):
    """The bot fills each sandboxed turn's deny list from its settings: the data directory,
    DETACH_SANDBOX_DENY_READ, the owner's keys; a session in ask mode gets none."""
    empty_repository(workdir)
    engine = FakeEngine(finished("ok"))
    extra = tmp_path / "private"
    async with app_in_own_task(
        settings(tmp_path, workdir, sandbox_deny_read=(extra,)),
        session=RecordingSession(),
        executors={"claude": engine},
    ) as app:
        await feed(app, message("/detach tidy up"))
        await until_status(app, 1, TaskStatus.DONE)
        await feed(app, message("/claude tidy up"))
        await until_status(app, 2, TaskStatus.DONE)
    sandboxed, asking = engine.specs
    denied = set(sandboxed.deny_read)
    assert {(tmp_path / "data").resolve(), extra, Path.home() / ".ssh"} <= denied
    assert sandboxed.cwd.is_relative_to(tmp_path / "data" / "worktrees")  # bound back in
    assert asking.deny_read == ()


async def test_a_sandboxed_command_may_commit_but_not_plant_git_config_or_hooks(workdir):
    """In a plain checkout (no worktree) the sandbox keeps ``.git/config``, ``hooks`` and
    ``info`` read-only, as Claude Code's does: a commit works, a planted fsmonitor or hook
    (which git would run for the owner, or the bot, later) does not land."""
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir.parent)}
    git = "git -c user.name=t -c user.email=t@t"
    setup = await ShellCheck(env, (), timeout_s=30).run(
        f"git init -q . && {git} commit -q --allow-empty -m base", workdir, False, 1
    )
    assert setup.passed, setup.output
    before = (workdir / ".git" / "config").read_text()
    plant = (
        "echo '[core] fsmonitor = touch /var/tmp/planted' >> .git/config; echo cfg=$?; "
        "echo 'touch /var/tmp/planted' > .git/hooks/pre-commit; echo hook=$?; "
        "echo '* filter=x' > .git/info/attributes; echo attr=$?; "
        f"echo work > a.txt && git add a.txt && {git} commit -q -m work; echo commit=$?"
    )
    checks = ShellCheck(env, (), timeout_s=30)
    result = await checks.run(plant, workdir, sandboxed=True, round_=1)
    assert result.output.count("Read-only file system") == 3, result.output
    assert "commit=0" in result.output, result.output
    assert (workdir / ".git" / "config").read_text() == before
    assert not (workdir / ".git" / "hooks" / "pre-commit").exists()
