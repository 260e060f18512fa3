"""A child never has more rights than its parent: a hostile agent in a sandboxed task with
sub-tasks (`/detach subtasks=yes`, the real claude CLI against the scripted model, the real
`detach mcp --parent`, nobody tapping) asks its sub-task server for more than it has — auto
mode, ask mode, no worktree, a directory outside its own, a check of its own, a grandchild
(a forged task file) —
and each ends refused with the reason in the tool's answer; the one sub-task it may start runs
sandboxed, in a worktree, with the parent's check and at most the parent's budget. The server's
``--mcp-config`` file holds no database URL and lies in the bot's private directory."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.errors import ToolRefused, UserInputError
from bot.mcp.handoff import taken
from bot.mcp.launch import subtask_env
from bot.models import ApprovalMode
from bot.settings import Settings
from bot.tasks.lineage import child_modes
from bot.tasks.taskfile import TaskFile, drop
from tests.support.fake_telegram import TOKEN, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_mcp import tool_use
from tests.test_mcp_ahead import _descends
from tests.test_walkaway_e2e import repository

R, S, A, U = (
    ApprovalMode.READONLY,
    ApprovalMode.SANDBOX,
    ApprovalMode.ASK,
    ApprovalMode.AUTO,
)


def test_the_rights_a_parent_may_hand_down():
    assert child_modes(R) == {R}
    assert child_modes(S) == {S, R}
    assert child_modes(A) == {A, S, R}
    assert child_modes(U) == {U, A, S, R}


def mcp_config_in_use(timeout_s: float = 60) -> Path:
    """The ``--mcp-config`` file on the command line of a claude this test's bot runs (read
    from /proc; another worker's claude is not this test's)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for proc in Path("/proc").iterdir():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
                if b"--mcp-config" in argv and _descends(int(proc.name), os.getpid()):
                    return Path(argv[argv.index(b"--mcp-config") + 1].decode())
            except (OSError, ValueError, IndexError):
                continue
        time.sleep(0.1)
    raise AssertionError("no claude with --mcp-config is running")


async def test_a_sandboxed_agent_gets_no_sub_task_with_more_rights_than_its_own(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    repository(workdir)  # a repository: the sandboxed parent works in a worktree of its own
    marker = tmp_path / "MODEL-CHECK-RAN"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    anthropic.script(
        "MARK-HPARENT",
        [
            tool_use("start", goal="MARK-HAUTO climb out", mode="auto", worktree=False),
            tool_use("start", goal="MARK-HASK ask for it", mode="ask"),
            tool_use("start", goal="MARK-HTREE in the checkout", worktree=False),
            tool_use("start", goal="MARK-HOUT elsewhere", cwd=str(outside)),
            tool_use("start", goal="MARK-HUP above", cwd=".."),
            tool_use("start", goal="MARK-HCHECK prove it", check=f"touch {marker}"),
            tool_use("start", goal="MARK-HCHILD do your part"),
            tool_use("watch", task_id=2, until_done=True, timeout_s=90),
            {"text": "HPARENT done."},
        ],
    )
    anthropic.script("MARK-HCHILD", [{"text": "HCHILD did its part"}])
    async with FakeTelegram() as fake:
        data_dir = tmp_path / "data"
        settings = make_settings(data_dir, fake, claude_bin, workdir, subtask_depth=1)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message(
                '/detach subtasks=yes max_usd=0.5 check="echo OWNER-CHECK" MARK-HPARENT go',
                OWNER,
            )
            await fake.wait_text(OWNER, "#1 mark-hparent")
            config = await asyncio.to_thread(mcp_config_in_use)
            assert config.is_relative_to(data_dir.resolve() / "private"), config
            assert stat.S_IMODE(config.stat().st_mode) == 0o600
            assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
            text = config.read_text()
            # neither the database's URL nor its file (the checkout's path may say "sqlite")
            assert "sqlite:" not in text and "detach.sqlite" not in text
            assert "DATABASE_URL" not in text and TOKEN not in text
            assert json.loads(text)["mcpServers"]["detach"]["args"][-2:] == ["--parent", "1"]
            await fake.wait_text(OWNER, "HPARENT done.", timeout_s=180)
            parent, child = await app.store.tasks.get(1), await app.store.tasks.get(2)
            assert await app.store.tasks.get(3) is None  # only the one within its rights
            assert child.parent_id == 1 and not child.subtasks  # DETACH_SUBTASK_DEPTH=1
            assert child.approval_mode is ApprovalMode.SANDBOX
            assert await app.store.worktrees.get(2) is not None  # a worktree of its own
            assert Path(child.cwd).is_relative_to(data_dir / "worktrees")
            assert not Path(child.cwd).is_relative_to(workdir)
            assert child.check == parent.check == "echo OWNER-CHECK"
            assert child.max_usd is not None and child.max_usd <= 0.5
            assert not [c for c in fake.calls if "wants to use" in str(c.params.get("text"))]
            await forged_files_are_capped_by_the_bot_too(app, data_dir / "inbox", parent)
    answers = [r["last_user_text"] for r in anthropic.requests_for("MARK-HPARENT")]
    assert "may not run in auto mode" in answers[1] and "sandbox" in answers[1]
    assert "may not run in ask mode" in answers[2]
    assert "worktree=no is refused" in answers[3]
    assert "outside the allowed working directories" in answers[4]
    assert "outside the allowed working directories" in answers[5]
    assert "runs its parent's check" in answers[6]
    assert '"task_id": 2' in answers[7]
    assert not marker.exists()  # the model's check never ran


async def forged_files_are_capped_by_the_bot_too(app, inbox: Path, parent) -> None:  # type: ignore[no-untyped-def]
    """Whoever writes a sub-task's file (not only `detach mcp`), the bot caps it."""
    for refused, tf in (
        ("may not run in auto mode", TaskFile("MARK-HFORGED1 x", parent=1, mode="auto")),
        ("runs its parent's check", TaskFile("MARK-HFORGED2 x", parent=1, check="touch x")),
        ("#2 is no task that may start sub-tasks", TaskFile("MARK-HFORGED3 x", parent=2)),
    ):
        with pytest.raises(ToolRefused, match=refused):
            await taken(drop(inbox, dataclasses.replace(tf, chat_id=OWNER), "forged"), 20)
    forged = TaskFile("MARK-HFORGED4 x", chat_id=OWNER, parent=1, max_usd="100", mode="readonly")
    task = await app.store.tasks.get(await taken(drop(inbox, forged, "forged"), 20))
    assert task.parent_id == 1 and task.approval_mode is ApprovalMode.READONLY
    assert task.max_usd is not None and task.max_usd <= parent.max_usd  # what is left, at most


def test_the_sub_task_servers_environment_holds_no_database_password(tmp_path):
    secret = "s3cr3t-pw"
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER}),
        data_dir=tmp_path / "data",
        database_url=f"postgresql+asyncpg://detach:{secret}@127.0.0.1/detach",
    )
    env = subtask_env(settings)
    assert not [v for v in env.values() if secret in v or "postgresql" in v]
    private = Path(env["DETACH_ENV_FILE"])
    assert private.parent == (tmp_path / "data").resolve() / "private"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert secret in private.read_text()
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "from bot.config import load_settings; print(load_settings()[0].resolved_database_url)",
        ],
        env={**env, "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert loaded.stdout.strip().endswith(f"detach:{secret}@127.0.0.1/detach"), loaded.stderr


@pytest.mark.parametrize("asked", ["auto", "ask", "sandbox"])
def test_a_readonly_parent_gives_only_readonly(asked):
    from bot.tasks.lineage import Lineage

    class Parent:
        approval_mode = ApprovalMode.READONLY
        label = "#1 p"

    lineage = Lineage(Parent(), False, None)  # type: ignore[arg-type]
    with pytest.raises(UserInputError) as refused:
        lineage.mode(ApprovalMode(asked))
    assert refused.value.key == "subtask.mode_refused"
    assert lineage.mode(None) is ApprovalMode.READONLY
