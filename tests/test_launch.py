"""How the bot starts (bot/launch.py): `detach run` and `detach worker` become `python -OO -P`
(no docstrings or asserts in memory; the current directory off sys.path), in the same process;
everything else starts as it was. And the bot so started does a whole day's work: a task, an
approval, a follow-up, /cancel."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import psutil

from bot.launch import _optimizable
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, process_env, stop_process
from tests.support.processes import matching
from tests.test_approvals_e2e import buttons, touch

SLEEP = "sleep 46.75"


def test_only_serving_commands_are_started_again_optimized():
    assert _optimizable(["run"]) and _optimizable(["worker", "w1"])
    for args in ([], ["mcp"], ["add", "goal"], ["list"], ["init"], ["run", "--help"]):
        assert not _optimizable(args), args


def test_deciding_how_to_start_imports_nothing_heavy():
    """The launcher runs before the exec: ``import bot`` loads neither pydantic nor aiogram (the
    deferral of aiogram's types is installed for when aiogram is first imported)."""
    from tests.test_architecture import _fresh

    probe = "import sys, bot.launch; print(sorted({'pydantic', 'aiogram'} & set(sys.modules)))"
    assert _fresh(probe) == "[]"


def test_a_serving_process_imports_without_the_cyclic_collector():
    """``detach run``/``worker`` switch the collector off before their first heavy import (the
    app's import switches it back on, its objects frozen); other commands keep it."""
    from tests.test_architecture import _fresh

    probe = (
        "import gc, sys, bot.launch; bot.launch.collect_after_imports(sys.argv[1:]); "
        "print(gc.isenabled())"
    )
    assert _fresh(probe.replace("sys.argv[1:]", "['run']")) == "False"
    assert _fresh(probe.replace("sys.argv[1:]", "['worker', 'w1']")) == "False"
    assert _fresh(probe.replace("sys.argv[1:]", "['list']")) == "True"
    assert _fresh(probe.replace("sys.argv[1:]", "[]")) == "True"
    # and once the app is imported, it is on again, the imports' objects frozen
    served = (
        "import gc, bot.launch, bot.cli\n"
        "bot.launch.collect_after_imports(['run'])\n"
        "with bot.cli._importing():\n"
        "    import bot.app\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 100000)"
    )
    assert _fresh(served) == "True True"


async def test_detach_run_optimized_does_a_whole_task(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-OO",
        [touch("approved.txt"), {"text": "made approved.txt"}, {"text": "second answer"}],
    )
    anthropic.script(
        "MARK-HALT",
        [
            {"tool_use": {"name": "Bash", "input": {"command": SLEEP, "description": "wait"}}},
            {"text": "never"},
        ],
    )
    # where `detach run` is typed: a package named `bot` that must not be the one run (-P)
    (tmp_path / "bot").mkdir()
    (tmp_path / "bot" / "__init__.py").write_text("raise SystemExit('the wrong bot ran')\n")
    detach = Path(sys.executable).parent / "detach"  # the console script the units run
    async with FakeTelegram() as fake:
        env = process_env(agent_env, fake, tmp_path / "data", claude_bin, workdir)
        log = open(tmp_path / "bot.log", "ab")  # noqa: SIM115 (the child owns it)
        bot = await asyncio.create_subprocess_exec(
            str(detach), "run", cwd=tmp_path, env=env, stdout=log, stderr=log
        )
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            assert psutil.Process(bot.pid).cmdline()[1:6] == ["-OO", "-P", "-m", "bot", "run"]
            await fake.user_message("/claude mode=ask MARK-OO make a file", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
            await fake.press(OWNER, ask.result["message_id"], buttons(ask)["✅ Allow"], OWNER)
            card = await fake.wait_text(OWNER, "made approved.txt", timeout_s=60)
            assert (workdir / "approved.txt").exists()
            mark = len(fake.calls)
            await fake.user_message(
                "and now?", OWNER, reply_to_message_id=card.result["message_id"]
            )
            await fake.wait_text(OWNER, "second answer", timeout_s=60, after=mark)
            await fake.user_message("/detach MARK-HALT wait", OWNER)
            await fake.wait_text(OWNER, "#2 mark-halt-wait")
            async with asyncio.timeout(30):
                while not matching(SLEEP):
                    await asyncio.sleep(0.1)
            await fake.user_message("/cancel 2", OWNER)
            await fake.wait_shown(OWNER, "cancelled", timeout_s=30)
            async with asyncio.timeout(20):  # its tool stopped with it
                while matching(SLEEP):
                    await asyncio.sleep(0.1)
        finally:
            await stop_process(bot)
            for proc in matching(SLEEP):
                proc.kill()
    assert bot.returncode == 0
    assert "wrong bot" not in (tmp_path / "bot.log").read_text()


async def test_what_the_first_poll_does_not_need_starts_after_it(tmp_path, claude_bin, workdir):
    """``serve`` builds the app unsettled and polls: APScheduler (~0.1 s to start, its imports
    besides) is not started by the build; ``settle`` starts it, with the PRs' follow-up."""
    from bot.prs.follow import FOLLOW_TASK
    from tests.support.harness import app_in_own_task, make_settings

    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with app_in_own_task(settings, settle=False) as app:
            assert not app.core.scheduler.running
            await app.settle()
            assert app.core.scheduler.running
            scheduler = await app.core.scheduler.started()
            assert FOLLOW_TASK in {schedule.id for schedule in await scheduler.get_schedules()}
