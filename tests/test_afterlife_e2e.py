"""After Merge or Discard, a reply continues the same session, end to end: the real bot over HTTP
against the fake Bot API, the real pinned claude against the scripted model server. ``/detach`` in
a repository works in its own worktree; after a Merge (or a Discard) a reply to its card finds
the worktree cut again at the same path, the CLI resumes the same session there (the model is
sent the whole conversation), and its new change can be merged again."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bot.telegram.callbacks import TaskAction, TaskButton
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

MARK = "MARK-AFTERLIFE"


def bash(command: str) -> dict:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "d"}}}


def repository(path: Path) -> None:
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README").write_text("hello\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)


def two_turns(anthropic) -> None:  # type: ignore[no-untyped-def]
    """One script across both turns: its step is the number of assistant messages the request
    carries, so the second turn gets its steps only when the session was resumed."""
    anthropic.script(
        MARK,
        [
            bash("printf 'one\\n' > one.txt && echo wrote"),
            {"text": "wrote one"},
            bash("printf 'two\\n' > two.txt && echo wrote"),
            {"text": "wrote two"},
        ],
    )


def actions(call) -> list[str]:  # type: ignore[no-untyped-def]
    rows = (call.params.get("reply_markup") or {}).get("inline_keyboard") or []
    return [TaskAction.unpack(b["callback_data"]).action for row in rows for b in row]


async def press(fake: FakeTelegram, message_id: int, action: TaskButton) -> None:
    await fake.press(OWNER, message_id, TaskAction(action=action, task_id=1).pack(), OWNER)


async def first_turn(fake: FakeTelegram, app) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    """The task's first card (offering Merge), its directory and its session."""
    fake.allow_sandboxed(OWNER, "echo wrote")  # its parse, run out of time under load
    await fake.user_message(f"/detach {MARK} write one", OWNER)
    card = await fake.wait_text(OWNER, "wrote one", timeout_s=90)
    assert TaskButton.MERGE in actions(card)
    task = await app.store.tasks.get(1)
    assert Path(task.cwd, "one.txt").exists() and task.session_id
    return card.result["message_id"], task.cwd, task.session_id


async def continued(fake: FakeTelegram, app, card_id: int, cwd: str, session: str, anthropic):  # type: ignore[no-untyped-def]
    """A reply to the card: the same session goes on in the same directory, and its new card
    offers Merge again."""
    await fake.user_message("now the second file", OWNER, reply_to_message_id=card_id)
    await fake.wait_text(OWNER, "a fresh worktree from", timeout_s=30)
    card = await fake.wait_text(OWNER, "wrote two", timeout_s=90)
    task = await app.store.tasks.get(1)
    assert (task.cwd, task.session_id) == (cwd, session)
    assert Path(cwd, "two.txt").read_text() == "two\n"
    requests = anthropic.requests_for(MARK)  # all of one conversation: the first prompt's
    asked = [r for r in requests if "now the second file" in r["last_user_text"]]
    assert len(requests) == 4 and len(asked) == 1  # the reply, with the whole conversation
    assert asked[0]["roles"].count("assistant") == 2 and "wrote one" in str(asked[0]["messages"])
    assert TaskButton.MERGE in actions(card)
    return card.result["message_id"]


async def test_a_reply_after_merge_goes_on_in_the_same_session_and_place(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    repository(workdir)
    two_turns(anthropic)
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, agent_env) as app:
            card_id, cwd, session = await first_turn(fake, app)
            await press(fake, card_id, TaskButton.MERGE)
            merged = await fake.wait_call(
                "editMessageText", lambda c: "merged into" in c.params["text"], 30
            )
            assert TaskButton.MERGE not in actions(merged)
            assert {TaskButton.FOLLOWUP, TaskButton.TO_TERMINAL} <= set(actions(merged))
            assert (workdir / "one.txt").exists() and not Path(cwd).exists()
            second = await continued(fake, app, card_id, cwd, session, anthropic)
            assert Path(cwd, "one.txt").exists()  # cut from main as the merge left it
            await press(fake, second, TaskButton.MERGE)
            await fake.wait_call(
                "editMessageText",
                lambda c: "merged into" in c.params["text"] and "wrote two" in c.params["text"],
                30,
            )
    assert (workdir / "two.txt").read_text() == "two\n"


async def test_a_reply_after_discard_goes_on_in_the_same_session_from_where_it_started(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    repository(workdir)
    two_turns(anthropic)
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, agent_env) as app:
            card_id, cwd, session = await first_turn(fake, app)
            start = (await app.store.worktrees.get(1)).base_commit
            await press(fake, card_id, TaskButton.DISCARD)
            asked = await fake.wait_text(OWNER, "Discard it anyway?")
            await press(fake, asked.result["message_id"], TaskButton.DISCARD_YES)
            await fake.wait_call(
                "editMessageText", lambda c: "worktree and branch removed" in c.params["text"], 30
            )
            assert not Path(cwd).exists()
            await continued(fake, app, card_id, cwd, session, anthropic)
            assert not Path(cwd, "one.txt").exists()  # what was discarded stays discarded
            assert (await app.store.worktrees.get(1)).base_commit == start
    assert not (workdir / "one.txt").exists() and not (workdir / "two.txt").exists()
