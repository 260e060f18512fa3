"""Walk away for real, end to end: the real bot over HTTP against the fake Bot API, the real
pinned claude against the scripted model server. A /detach task in a repository runs sandboxed
in its own worktree with no taps, its check fails, the failure goes back to the same session,
round two passes, and the card says so; where bubblewrap is missing the task says so and asks."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from bot.approvals.view import CHECK_GRANTS, check_pattern
from bot.models import ApprovalMode, TaskStatus
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.machine import path_without_bwrap


def bash(command: str) -> dict:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "d"}}}


def repository(path: Path) -> None:
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README").write_text("hello\n")
    (path / ".detach.toml").write_text('check = "sh check.sh"\n')
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)


# with the owner tools, the agent has an MCP server and takes longer to exit after its answer:
# the check ran meanwhile, and its sweep (the turn's tag) killed the exiting agent, whose
# session then lacked its last lines (round two started a new session)
@pytest.mark.parametrize("owner_tools", ["no", "walkaway"])
async def test_detach_runs_sandboxed_with_no_taps_and_is_done_when_its_check_passes(
    tmp_path, claude_bin, agent_env, anthropic, workdir, owner_tools, caplog
):
    caplog.set_level(logging.WARNING, logger="executors")
    repository(workdir)
    anthropic.script(
        "MARK-WALK",
        [
            bash("printf 'echo FAILING-ASSERT; exit 1\\n' > check.sh && echo wrote"),
            {"text": "first try"},
            bash("printf 'echo ALL-GOOD\\n' > check.sh && echo fixed"),
            {"text": "fixed it"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, owner_tools=owner_tools
        )
        fake.allow_sandboxed(OWNER, "> check.sh")  # its parse, run out of time under load
        async with running_bot(settings, agent_env) as app:
            # the owner once said "Always" to this repository's check (tests/test_check_consent)
            await app.store.grants.add(
                OWNER, CHECK_GRANTS, str(workdir), check_pattern("sh check.sh")
            )
            await fake.user_message("/detach MARK-WALK make the check pass", OWNER)
            ack = await fake.wait_text(OWNER, "#1 mark-walk")
            assert "sandboxed" in ack.params["text"] and "sh check.sh" in ack.params["text"]
            card = await fake.wait_text(OWNER, "check passed", timeout_s=90)
            text = card.params["text"]
            assert (
                "round 2" in text
                and "fixed it" in text
                and "Merge" in str(card.params["reply_markup"])
            )
            assert fake.asked() == []  # not one tap
            retried = await fake.wait_text(OWNER, "went back to the agent")
            assert "FAILING-ASSERT" in retried.params["text"]
            task = await app.store.tasks.get(1)
            assert task.status is TaskStatus.DONE
            assert task.approval_mode is ApprovalMode.SANDBOX
            assert Path(task.cwd).is_relative_to(settings.data_dir / "worktrees")
            assert (Path(task.cwd) / "check.sh").read_text() == "echo ALL-GOOD\n"
            requests = anthropic.requests_for("MARK-WALK")
            assert "FAILING-ASSERT" in requests[2]["last_user_text"]  # round two was told why
            assert "operating-system sandbox" in requests[0]["system"]
            sessions = {
                line.turn_id: line.body["session_id"]
                for line in await app.store.transcript.tail(1, 100)
                if line.kind == "SessionStarted"
            }
            assert len(sessions) == 2 and len(set(sessions.values())) == 1  # resumed
    killed = [r.getMessage() for r in caplog.records if "was killed" in r.getMessage()]
    assert killed == []  # each agent ended by itself after its answer
    assert not (workdir / "check.sh").exists()  # the user's checkout is untouched until Merge


async def test_without_bubblewrap_detach_says_so_and_asks(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-NOBW", [bash("touch made.txt"), {"text": "went on"}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(
            settings, {**agent_env, "PATH": path_without_bwrap(tmp_path)}
        ) as app:
            await fake.user_message("/status", OWNER)
            status = await fake.wait_text(OWNER, "sandbox UNAVAILABLE")
            assert "bwrap" in status.params["text"]
            await fake.user_message("/detach MARK-NOBW make a file", OWNER)
            ack = await fake.wait_text(OWNER, "No sandbox on this machine")
            assert "ask mode" in ack.params["text"]
            await fake.wait_text(OWNER, "wants to use", timeout_s=60)
            task = await app.store.tasks.get(1)
            assert task.approval_mode is ApprovalMode.ASK
