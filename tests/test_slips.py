"""The phone's slips of issue 53, one small test each, in both languages where the chat speaks:
/help names every menu command; /every without a goal keeps its time in the example; a
schedule shows its options resolved; /cd names the path it tried; /result of a running task
says so; /grants shows a check's command, not its hash; a Codex approval without a reason has
no empty line; `detach export` of a missing task answers in the shell's words; `detach add`
prints no inbox path, and the chat names the goal and the shell, not the task file."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from bot.approvals.view import check_pattern, describe
from bot.telegram.texts import Texts
from executors import registry
from executors.codex_protocol import COMMAND_APPROVAL, TurnState, approval_request
from handlers import COMMANDS
from tests.conftest import ROOT
from tests.support.fake_engine import FakeEngine, Until
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, running_bot
from tests.test_cli import detach
from tests.test_phone import SESSION, answer, settings

LOCALES = ("en", "ru")


@pytest.mark.parametrize("locale", LOCALES)
def test_help_names_every_command_of_the_menu(locale):
    shown = Texts().get(locale, "start.help")
    menu = ("detach", *registry.names(), *COMMANDS)
    assert len(menu) == 30
    assert [c for c in menu if f"/{c} " not in shown and f"/{c}\n" not in shown] == []


async def said(fake: FakeTelegram, text: str, needle: str, chat_id: int = OWNER) -> str:
    mark = len(fake.calls)
    await fake.user_message(text, chat_id)
    return (await fake.wait_text(chat_id, needle, after=mark)).params["text"]


async def test_every_without_a_goal_keeps_its_time_and_a_schedule_shows_its_model_resolved(
    tmp_path, workdir
):
    async with FakeTelegram() as fake:
        engine = FakeEngine(answer("done"))
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            text = await said(fake, "/every day 09:00", "Tell me what to do")
            assert "<code>/every day 09:00 fix the failing login test</code>" in text
            text = await said(fake, "/at tomorrow 18:30", "Tell me what to do")
            assert "<code>/at tomorrow 18:30 fix the failing login test</code>" in text
            text = await said(fake, "/every day 09:00 model=sonet ping", "S1")
            assert "<i>model=sonnet ping</i>" in text and "sonet " not in text
            text = await said(fake, "/schedules", "S1")
            assert "<i>model=sonnet ping</i>" in text
            await said(fake, "/lang ru", "Русский")
            text = await said(fake, "/every weekdays 18:30", "Скажите, что сделать")
            assert "<code>/every weekdays 18:30 почини падающий тест логина</code>" in text


async def test_cd_to_a_missing_directory_names_the_path_it_tried(tmp_path, workdir):
    async with FakeTelegram() as fake:
        engine = FakeEngine(answer("done"))
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            text = await said(fake, "/cd nosuchdir", "nosuchdir")
            assert f"(looked for <code>{workdir.resolve()}/nosuchdir</code>)" in text
            await said(fake, "/lang ru", "Русский")
            text = await said(fake, "/cd nosuchdir", "nosuchdir")
            assert f"Нет такого каталога: <code>nosuchdir</code> (искал <code>{workdir}" in text
            text = await said(fake, f"/cd {workdir}/gone", "gone")  # typed whole: said once
            assert text.count(f"{workdir}/gone") == 1


async def test_result_of_a_running_task_says_it_runs_and_its_latest_line(tmp_path, workdir):
    from bot.events import SessionStarted, TextEmitted, ToolCalled

    gate = asyncio.Event()
    script = (
        SessionStarted(SESSION, "fake-model"),
        TextEmitted("Reading the code first."),
        ToolCalled("t1", "Bash", "grep -rn login src"),
        Until(gate),
        *answer("done at last")[2:],
    )
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir), {}, {"claude": FakeEngine(script)}
        ) as app:
            await fake.user_message("/claude find the login code", OWNER)
            await fake.wait_text(OWNER, "#1 find-login")
            async with asyncio.timeout(10):
                while len(await app.store.transcript.tail(1)) < 3:
                    await asyncio.sleep(0.05)
            text = await said(fake, "/result 1", "#1 find-login")
            assert text.startswith("#1 find-login-code is running (for ")
            assert "no answer yet. Latest:\n<i>▸ Bash: grep -rn login src</i>" in text
            await said(fake, "/lang ru", "Русский")
            text = await said(fake, "/result 1", "#1 find-login")
            assert "выполняется" in text and "Последнее:" in text
            gate.set()
            await fake.wait_text(OWNER, "done at last")


async def test_grants_show_a_checks_command_and_directory_not_its_hash(tmp_path, workdir):
    command = "sh verify.sh"
    async with FakeTelegram() as fake:
        engine = FakeEngine(answer("done"))
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await app.store.grants.add(OWNER, "check", str(workdir), check_pattern(command))
            await app.store.grants.add(OWNER, "claude", str(workdir), "Bash(make test:*)")
            text = await said(fake, "/grants", "Remembered approvals")
            digest = check_pattern(command).split()[1].rstrip(":")
            assert digest not in text
            assert f"1. check <code>{command}</code> in <code>{workdir}</code>" in text
            assert f"2. <code>Bash(make test:*)</code> — claude in <code>{workdir}</code>" in text
            await said(fake, "/lang ru", "Русский")
            text = await said(fake, "/grants", "проверка")
            assert f"1. проверка <code>{command}</code> в <code>{workdir}</code>" in text


@pytest.mark.parametrize(("locale", "runs"), [("en", "runs ls"), ("ru", "запускает ls")])
def test_a_codex_approval_without_a_reason_has_no_empty_line(locale, runs):
    params = {"itemId": "i1", "command": "/bin/bash -lc 'ls -la'", "reason": None}
    request = approval_request(COMMAND_APPROVAL, params, TurnState())
    lines = describe(Texts(), locale, request)
    assert "<i></i>" not in lines and all(x.strip() for x in lines)
    assert lines[-1] == f"<i>{runs}</i>"
    reasoned = approval_request(COMMAND_APPROVAL, {**params, "reason": "list it"}, TurnState())
    assert describe(Texts(), locale, reasoned)[-1] == "<i>list it</i>"


def test_export_of_a_missing_task_answers_in_the_shells_words(tmp_path):
    assert detach(tmp_path, "add", "--mode", "ask", "Tidy", "the", "logs").returncode == 0
    missing = detach(tmp_path, "export", "999")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "detach: no task #999 (`detach list` lists them)"


async def test_detach_add_prints_the_number_and_the_chat_names_the_goal(tmp_path, workdir):
    async with FakeTelegram() as fake:
        the_settings = settings(tmp_path, fake, workdir)
        engine = FakeEngine(answer("Shell done."))
        async with running_bot(the_settings, {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "DETACH_DATA_DIR": str(the_settings.data_dir),
                "DETACH_ALLOWED_USERS": str(OWNER),
                "DETACH_WORKDIR": str(workdir),
            }
            env.pop("DETACH_BOT_TOKEN", None)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "add", "Tidy", "the", "logs", cwd=workdir, env=env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, err
            assert out.decode().startswith("#1 tidy-logs queued"), out
            assert "inbox" not in out.decode() and ".md" not in out.decode()
            ack = (await fake.wait_text(OWNER, "#1 tidy-logs", timeout_s=10)).params["text"]
            assert "<i>Tidy the logs</i>\n⌨️ from the shell (<code>detach add</code>)" in ack
            assert "task file" not in ack and ".md" not in ack
