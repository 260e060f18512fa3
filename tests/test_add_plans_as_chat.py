"""`detach add` plans as the chat does: one table of inputs (options valid and invalid) goes
through the chat (`/detach …`, the real handler against the fake Bot API) and through `detach
add`'s planning (``bot.shell.plan_add``, what the command runs before it hands the task over),
and both must come to the same task (its engine, model, budget, mode, directory, worktree,
check, sub-tasks, title) or the same error (the same key and parameters, as the chat says it).
Then the command itself, as a process beside the running bot, prints the task's number."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bot.app import App
from bot.errors import UserInputError
from bot.models import NewTask, Task
from bot.shell import plan_add, typed_options
from bot.tasks.console import ConsoleTasks
from bot.telegram.render import plain
from bot.telegram.texts import Texts
from tests.conftest import ROOT
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import Call, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_phone import answer

VALID = (
    "fix the login",
    "mode=auto fix the login",
    "mode=ask model=sonnet fix it",
    "engine=codex mode=ask port it",
    'check="test -d ." mode=ask test it',
    "check=no mode=ask no check at all",
    "max_usd=2.5 mode=ask cap it",
    "subtasks=yes mode=ask split it",
    "subtasks=yes engine=codex go",  # any engine's parent may start sub-tasks (#55)
    "cwd=sub mode=ask in a subdirectory",
    "worktree=yes cwd=repo mode=ask branch it",
    "cwd=repo mode=ask the repository's own check",
)
REFUSED = (
    "mode=yolo go",
    "engine=gpt go",
    "worktree=maybe go",
    "max_usd=lots go",
    "subtasks=maybe go",
    "cwd=/etc go",
    "cwd=missing go",
    "model=nonesuch go",
    "colour=red go",
    "mode=ask mode=auto go",
    "mode=ask",
    "worktree=yes mode=ask not in a repository",
)


def fields(new: NewTask | Task, cwd: str, worktree: bool) -> dict[str, object]:
    """What the owner gets of a task, whichever road planned it."""
    title = new.title if isinstance(new, Task) else (new.title or new.prompt)
    return {
        "engine": new.engine,
        "preset": new.preset,
        "model": new.model,
        "max_usd": new.max_usd,
        "mode": new.approval_mode,
        "cwd": cwd,
        "worktree": worktree,
        "check": new.check,
        "check_repository": new.check_repository,
        "subtasks": new.subtasks,
        "title": title,
    }


async def through_chat(app: App, fake: FakeTelegram, text: str) -> dict[str, object] | str:
    """`/detach <text>` in the chat: the task it started, or what the chat answered."""
    before = await app.store.tasks.list_for(None)
    label = f"#{max((t.id for t in before), default=0) + 1} "

    def answers(call: Call) -> bool:  # its acknowledgement, or a line about no other task
        text = str(call.params.get("text", ""))
        return label in text or not re.search(r"#\d+ ", text)

    mark = len(fake.calls)
    await fake.user_message(f"/detach {text}", OWNER)
    said = await fake.wait_call("sendMessage", answers, 10, after=mark)
    found = await app.store.tasks.list_for(None)
    if len(found) == len(before):
        return plain(said.params["text"])
    task = max(found, key=lambda t: t.id)
    worktree = await app.store.worktrees.get(task.id)
    cwd = worktree.repo_root if worktree is not None else task.cwd
    return fields(task, cwd, worktree is not None)


async def through_add(app: App, text: str) -> dict[str, object] | str:
    """`detach add <text>` planned: its NewTask, or its error as the chat would say it."""
    try:
        console = ConsoleTasks(app.store)
        planned = await plan_add(
            app.settings, console, OWNER, OWNER, text, app.settings.default_workdir
        )
    except UserInputError as exc:
        return plain(Texts().get("en", exc.key, **exc.params))
    new = planned.new
    return fields(new, str(new.cwd), new.worktree)


@pytest.fixture
def places(workdir: Path) -> Path:
    from tests.test_worktrees import make_repo

    (workdir / "sub").mkdir()
    repo = make_repo(workdir / "repo")
    (repo / ".detach.toml").write_text('check = "make test"\n')
    return workdir


async def test_detach_add_and_the_chat_plan_one_table_alike(tmp_path, places):
    engines = {name: FakeEngine(answer("ok"), engine=name) for name in ("claude", "codex", "local")}
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", places)
        async with running_bot(settings, {}, engines) as app:
            await fake.wait_call("setMyCommands")
            for text in (*VALID, *REFUSED):
                chat, add = await through_chat(app, fake, text), await through_add(app, text)
                assert chat == add, text
                assert isinstance(chat, dict) == (text in VALID), (text, chat)


def test_the_shells_words_are_typed_options_again():
    """The shell takes the quotes off ``check="pytest -q"``; they go back on, and only the
    leading options are options (a goal's own ``a=b`` stays as it was)."""
    words = ["check=pytest -q", "mode=ask", "fix", "x=1 y", "now"]
    assert typed_options(words) == ['check="pytest -q"', "mode=ask", "fix", "x=1 y", "now"]
    assert typed_options(['check=say "hi" twice', "go"]) == ["check='say \"hi\" twice'", "go"]


async def test_detach_add_beside_the_running_bot_prints_the_tasks_number(tmp_path, workdir):
    """A sandboxed task goes through the inbox: the command waits for the bot to take it and
    prints its number and slug, as the chat's acknowledgement names it."""
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        async with running_bot(settings, {}, {"claude": FakeEngine(answer("Shell done."))}):
            await fake.wait_call("setMyCommands")
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "DETACH_DATA_DIR": str(settings.data_dir),
                "DETACH_ALLOWED_USERS": str(OWNER),
                "DETACH_WORKDIR": str(workdir),
            }
            env.pop("DETACH_BOT_TOKEN", None)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "add", "--check", "true", "model=haiku", "fix",
                "the", "login", cwd=workdir, env=env, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, err
            assert out.decode().startswith("#1 fix-login queued in its directory"), out
            ack = await fake.wait_text(OWNER, "#1 fix-login", timeout_s=10)
            assert "sandboxed" in ack.params["text"] and "true" in ack.params["text"]
