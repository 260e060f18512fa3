"""The card of a task in a plain checkout (no worktree) says what its turn changed: the commits
it made and the files it touched, not the owner's own uncommitted edits from before it (the
real bot over the fake Bot API, an engine that acts with real git in the directory)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bot.events import SessionStarted, ToolCalled, TurnFinished, Usage
from bot.models import TurnSpec
from bot.turns.baseline import take, turn_changes
from executors.gitguard import GitGuard
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

SESSION = "0f0e0d0c-0b0a-4908-8706-050403020199"

GIT = GitGuard()  # the bot's git, confined (nothing denied in these tests)


def git(cwd: Path, *args: str) -> None:
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "-C", str(cwd), *ident, *args], check=True, capture_output=True)


def checkout(path: Path) -> None:
    """A repository with two committed files; then the owner's own edits, not committed."""
    git(path, "init", "-q")
    (path / "mine.txt").write_text("one\n")
    (path / "shared.txt").write_text("one\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "init")
    (path / "mine.txt").write_text("one\nthe owner's edit\n")
    (path / "notes-of-mine.md").write_text("draft\n")


def answered(text: str) -> tuple:
    return (
        SessionStarted(SESSION, "fake-model"),
        ToolCalled("t1", "Bash", "git commit"),
        TurnFinished(
            is_error=False,
            result_text=text,
            session_id=SESSION,
            cost_usd=0.01,
            usage=Usage(input_tokens=10, output_tokens=5),
        ),
    )


def agent(spec: TurnSpec) -> tuple:
    """Commits a new file, then leaves an edit and a new file uncommitted."""
    (spec.cwd / "feature.py").write_text("print('hi')\n")
    git(spec.cwd, "add", "feature.py")
    git(spec.cwd, "commit", "-qm", "Add the feature <b>")
    (spec.cwd / "shared.txt").write_text("one\ntwo\n")
    (spec.cwd / "scratch.log").write_text("x\n")
    return answered("Committed the feature.")


async def test_a_plain_checkout_card_lists_the_turns_commit_not_the_owners_edits(tmp_path, workdir):
    checkout(workdir)
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        async with running_bot(settings, {}, {"claude": FakeEngine(agent)}):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude add the feature", OWNER)
            card = (await fake.wait_text(OWNER, "Committed the feature.", timeout_s=20)).params
    text = card["text"]
    assert "Add the feature &lt;b&gt;" in text  # the commit, its subject escaped
    assert "feature.py" in text and "shared.txt" in text and "scratch.log | new" in text
    assert "mine.txt" not in text and "notes-of-mine.md" not in text
    assert (workdir / "mine.txt").read_text() == "one\nthe owner's edit\n"  # left as it was


async def test_a_turn_that_edits_or_reverts_an_owners_file_lists_it(tmp_path):
    checkout(tmp_path)
    before = await take(GIT, str(tmp_path))
    assert before.head and set(before.dirty) == {"mine.txt", "notes-of-mine.md"}
    assert await turn_changes(GIT, str(tmp_path), before) == ""  # nothing happened since
    (tmp_path / "mine.txt").write_text("one\nthe owner's edit\nand the agent's\n")
    changes = await turn_changes(GIT, str(tmp_path), before)
    assert "mine.txt" in changes and "notes-of-mine.md" not in changes
    git(tmp_path, "checkout", "--", "mine.txt")  # the owner's edit thrown away: said too
    (tmp_path / "notes-of-mine.md").unlink()
    changes = await turn_changes(GIT, str(tmp_path), before)
    assert "mine.txt" in changes and "notes-of-mine.md" in changes


async def test_commits_in_a_repository_that_had_none_and_in_a_subdirectory(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "sub").mkdir()
    before = await take(GIT, str(tmp_path / "sub"))
    assert before.top and before.head is None
    (tmp_path / "sub" / "a.txt").write_text("a\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "commit", "-qm", "first")
    (tmp_path / "sub" / "a.txt").write_text("a\nb\n")
    changes = await turn_changes(GIT, str(tmp_path / "sub"), before)
    assert "● " in changes and "first" in changes and "sub/a.txt" in changes
    assert (
        await turn_changes(GIT, str(tmp_path / "no-such"), await take(GIT, str(tmp_path / "x")))
        == ""
    )
