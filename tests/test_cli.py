"""The `detach` console script against a real SQLite file (no bot running)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT


def detach(tmp_path, *args: str, users: str = "111") -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),  # this checkout's bot, wherever the shell is
        "DETACH_DATA_DIR": str(tmp_path / "data"),
        "DETACH_ALLOWED_USERS": users,
        "DETACH_ALLOWED_WORKDIRS": str(tmp_path),
    }
    env.pop("DETACH_BOT_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_add_list_show_archive(tmp_path):
    added = detach(
        tmp_path, "add", "--mode", "ask", "--model", "sonnet", "Summarise", "the", "error", "logs"
    )
    assert added.returncode == 0, added.stderr
    assert "#1 summarise-error-logs queued" in added.stdout
    listed = detach(tmp_path, "list")
    assert "#1 summarise-error-logs" in listed.stdout and "queued" in listed.stdout
    shown = detach(tmp_path, "show", "1")
    assert "model=sonnet" in shown.stdout and "Summarise the error logs" in shown.stdout
    refused = detach(tmp_path, "archive", "1")
    assert refused.returncode == 1 and "still active" in refused.stderr
    assert detach(tmp_path, "show", "99").returncode == 1
    exported = detach(tmp_path, "export", "1")
    assert exported.returncode == 0, exported.stderr
    assert "slug: summarise-error-logs\nmodel: sonnet\nmode: ask\n---" in exported.stdout
    assert "# Goal\n\nSummarise the error logs\n" in exported.stdout
    missing = detach(tmp_path, "export", "99")
    assert missing.returncode == 1 and "#99" in missing.stderr


def test_add_with_a_worktree_drops_a_task_file_for_the_bot(tmp_path):
    """As in the chat, worktree=yes needs a repository (refused at once outside one); in one,
    the task file carries the options for the bot, which cuts the worktree."""
    from bot.tasks.taskfile import parse
    from tests.test_worktrees import make_repo

    refused = detach(tmp_path, "add", "--worktree", "Bump", "the", "version")
    assert refused.returncode == 1 and "needs a git repository" in refused.stderr
    repo = make_repo(tmp_path / "repo")
    added = detach(
        tmp_path, "add", "--worktree", "--cwd", "repo", "model=haiku", "Bump", "the", "version"
    )
    assert added.returncode == 0, added.stderr
    [dropped] = (tmp_path / "data" / "inbox").glob("*.md")
    assert "starts it in its own worktree" in added.stdout and "not numbered yet" in added.stdout
    assert str(tmp_path) not in added.stdout  # no inbox path: the task is the goal's
    tf = parse(dropped.read_text())
    assert (tf.goal, tf.model, tf.worktree, tf.cwd) == (
        "Bump the version",
        "haiku",
        "yes",
        str(repo.resolve()),
    )
    assert detach(tmp_path, "list").stdout.strip() == ""  # the bot creates the task


def test_add_is_sandboxed_by_default_and_the_bot_decides(tmp_path):
    """Without --mode the task is a walk-away task: sandboxed where the bot's sandbox works,
    so it goes through the inbox (the bot knows its sandbox and cuts the worktree); --check
    travels with it, the repository's .detach.toml is read (and checked) but left to the bot."""
    from bot.tasks.taskfile import parse

    added = detach(tmp_path, "add", "--check", "pytest -q", "Fix", "the", "tests")
    assert added.returncode == 0, added.stderr
    [dropped] = (tmp_path / "data" / "inbox").glob("*.md")
    tf = parse(dropped.read_text())
    assert (tf.goal, tf.mode, tf.check, tf.worktree) == ("Fix the tests", None, "pytest -q", None)
    dropped.unlink()

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / ".detach.toml").write_text('check = "make test"  # the whole suite\n')
    added = detach(tmp_path, "add", "--cwd", str(repo), "--no-worktree", "Tidy")
    assert added.returncode == 0, added.stderr
    [dropped] = (tmp_path / "data" / "inbox").glob("*.md")
    tf = parse(dropped.read_text())
    # the repository's check is the bot's to read (and to ask the owner about), not the file's
    assert (tf.check, tf.worktree, tf.cwd) == (None, "no", str(repo.resolve()))

    (repo / ".detach.toml").write_text("check = [1]\n")
    refused = detach(tmp_path, "add", "--cwd", str(repo), "Tidy")
    assert refused.returncode != 0 and ".detach.toml" in refused.stderr


def test_add_says_whether_a_bot_is_running(tmp_path):
    """No heartbeat: the task waits, and `detach add` says so; a fresh heartbeat (the running
    bot's intake touches it every 5 s): the running bot reports. A stale one counts as none."""
    import time

    alone = detach(tmp_path, "add", "--mode", "ask", "Rotate", "the", "logs")
    assert alone.returncode == 0, alone.stderr
    assert "no bot is running" in alone.stdout and "waits until you start it" in alone.stdout
    assert "the running bot will report" not in alone.stdout
    inbox = detach(tmp_path, "add", "Tidy", "up")
    assert "no bot is running" in inbox.stdout and "once you start it" in inbox.stdout

    alive = tmp_path / "data" / "bot.alive"
    alive.touch()
    running = detach(tmp_path, "add", "--mode", "ask", "Rotate", "them", "again")
    assert "the running bot will report in chat 111" in running.stdout
    assert "no bot is running" not in running.stdout
    old = time.time() - 120
    os.utime(alive, (old, old))
    stale = detach(tmp_path, "add", "--mode", "ask", "Once", "more")
    assert "no bot is running" in stale.stdout


def test_add_needs_someone_to_report_to(tmp_path):
    result = detach(tmp_path, "add", "goal", users="")
    assert result.returncode == 2 and "DETACH_ALLOWED_USERS" in result.stderr


def test_run_without_a_token_says_how_to_get_one(tmp_path):
    result = detach(tmp_path, "run")
    assert result.returncode == 2
    assert "@BotFather" in result.stderr and "DETACH_BOT_TOKEN" in result.stderr


def test_make_run_target_exists_and_uses_the_console_entry():
    makefile = (ROOT / "Makefile").read_text()
    assert "run: venv" in makefile and "-m bot run" in makefile


def test_add_refuses_a_directory_outside_the_allowed_ones(tmp_path):
    result = detach(tmp_path, "add", "--cwd", "/etc", "read it")
    assert result.returncode == 1
    assert "/etc is outside the allowed working directories" in result.stderr
    assert detach(tmp_path, "list").stdout.strip() == ""


def test_show_prints_the_transcript_as_the_chat_does(tmp_path):
    import asyncio

    from bot.store import Store

    assert detach(tmp_path, "add", "--mode", "ask", "Tidy", "the", "logs").returncode == 0

    async def said() -> None:
        store = await Store.open(f"sqlite:///{tmp_path / 'data' / 'detach.sqlite'}")
        try:
            turn = await store.tasks.last_turn(1)
            events = [
                ("TextEmitted", {"text": "Looking at the logs \x1b]0;pwned\x07now"}),
                ("ToolCalled", {"name": "Bash", "summary": "ls logs", "call_id": "t1"}),
                ("ToolFinished", {"output": "a.log\nb.log", "is_error": False}),
                ("Usage", {"input_tokens": 5}),
                ("TurnFinished", {"is_error": False}),
            ]
            await store.transcript.append(1, turn.id, events)
        finally:
            await store.close()

    asyncio.run(said())
    shown = detach(tmp_path, "show", "1")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert "💬 Looking at the logs ?]0;pwned?now" in out  # no escape reaches the terminal
    assert "▸ Bash: ls logs" in out and "↳ a.log b.log" in out and "✔ the turn ended" in out
    assert "{" not in out and "Usage" not in out  # no Python dicts, no bookkeeping


def test_list_and_show_name_the_model_that_ran_beside_the_one_asked(tmp_path):
    """Asked `sonnet`; its engine named what ran (hostile text: no escape reaches the
    terminal); before any turn ran, it says so."""
    import asyncio

    from bot.models import TaskStatus
    from bot.store import Store, TurnOutcome

    assert detach(tmp_path, "add", "--mode", "ask", "--model", "sonnet", "Tidy").returncode == 0
    assert "model=sonnet ran=not yet" in detach(tmp_path, "list").stdout
    assert "model=sonnet ran=not yet" in detach(tmp_path, "show", "1").stdout

    async def ran() -> None:
        store = await Store.open(f"sqlite:///{tmp_path / 'data' / 'detach.sqlite'}")
        try:
            turn = await store.tasks.last_turn(1)
            named = "claude-sonnet-4-5\x1b[2J\nx"
            await store.tasks.finish_turn(turn, TurnOutcome(TaskStatus.DONE, "ok", model=named))
        finally:
            await store.close()

    asyncio.run(ran())
    listed = detach(tmp_path, "list").stdout
    assert "model=sonnet ran=claude-sonnet-4-5?[2J x" in listed and "\x1b" not in listed
    shown = detach(tmp_path, "show", "1").stdout
    assert "model=sonnet ran=claude-sonnet-4-5?[2J x\n" in shown and "\x1b" not in shown


def test_archive_in_the_shell_closes_the_tasks_topic_through_the_bots_outbox(tmp_path):
    """`detach archive` has no Telegram: the topic's closing is queued in the outbox the
    running bot delivers, as `/archive` queues it; a task without a topic queues nothing."""
    import asyncio

    import sqlalchemy as sa

    from bot.models import NewTask, OutboxOp, TaskKind, TaskStatus
    from bot.store import Store
    from bot.store.db import make_engine
    from bot.store.schema import outbox

    (tmp_path / "data").mkdir()
    url = f"sqlite+aiosqlite:///{tmp_path}/data/detach.sqlite"

    async def prepare() -> None:
        store = await Store.open(url)
        try:
            for prompt in ("in a topic", "in the chat", "another in a topic"):
                new = NewTask(111, 111, "claude", TaskKind.SESSION, prompt, tmp_path)
                task, _ = await store.tasks.create(new, prompt)
                await store.tasks.set_status(task.id, TaskStatus.DONE)
                await store.topics.place(
                    task.id, 111, None if "chat" in prompt else f"task:{task.id}"
                )
        finally:
            await store.close()

    async def closings() -> list[int]:
        engine = make_engine(url)
        try:
            query = sa.select(outbox.c.task_id).where(outbox.c.op == OutboxOp.CLOSE_TOPIC.value)
            async with engine.connect() as conn:
                return sorted(row.task_id for row in await conn.execute(query))
        finally:
            await engine.dispose()

    asyncio.run(prepare())
    assert detach(tmp_path, "archive", "1").returncode == 0
    assert asyncio.run(closings()) == [1]
    assert detach(tmp_path, "archive", "--all").returncode == 0
    assert asyncio.run(closings()) == [1, 3]
