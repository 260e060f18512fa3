"""Task files: the detach skill's Markdown format read and written; the inbox drop folder turns
a file into a task and writes the finished file back; a malformed file is set aside and its
owner told."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from bot.models import TaskStatus
from bot.settings import Settings
from bot.tasks.taskfile import TaskFile, TaskFileError, parse, render
from tests.support.fake_telegram import TOKEN
from tests.support.harness import app_in_own_task
from tests.support.recording_session import RecordingSession
from tests.test_handlers import OWNER, feed, message

DROPPED = """---
created: 2026-11-29T09:00:00+00:00
channel: telegram
chat_id: {chat}
slug: tidy-the-readme
model: sonnet
---

# Goal

MARK-INBOX Tidy the README.
Keep it short.

# Constraints

- Do not touch the code.
- English only.

# Result
"""


def test_render_and_parse_round_trip():
    original = TaskFile(
        goal="Fix the login page.\n\n## Details\nThe button.",
        constraints="- no new deps",
        result="Done: see `login.py`.\n\n---\nok",
        created=datetime(2026, 11, 29, 9, tzinfo=UTC),
        chat_id=-100123,
        slug="fix-login",
        model="opus",
        completed=datetime(2026, 11, 29, 9, 5, tzinfo=UTC),
        duration_seconds=300,
        status="done",
    )
    text = render(original)
    assert text.startswith("---\ncreated: 2026-11-29T09:00:00+00:00\nchannel: telegram\n")
    assert text.endswith(
        "---\ncompleted: 2026-11-29T09:05:00+00:00\nduration_seconds: 300\nstatus: done\n"
    )
    assert parse(text) == original


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("# Goal\nno frontmatter\n", "must start with a '---'"),
        ("---\nchat_id: 1\n# Goal\nx\n", "not closed"),
        ("---\nchat_id: 1\n---\n# Constraints\nonly this\n", "'# Goal' section is missing"),
        ("---\nchat_id: one\n---\n# Goal\nx\n", "chat_id: not a whole number"),
        ("---\ncolour: red\n---\n# Goal\nx\n", "unknown key 'colour'"),
        ("---\nchannel: slack\n---\n# Goal\nx\n", "only 'telegram'"),
        ("---\ncreated: yesterday\n---\n# Goal\nx\n", "created: not an ISO date"),
        ("---\n---\npreamble\n# Goal\nx\n", "text before the '# Goal'"),
        ("---\n---\n# Goal\nx\n# Goal\ny\n", "appears twice"),
    ],
)
def test_malformed_files_say_why(text, reason):
    with pytest.raises(TaskFileError) as refused:
        parse(text)
    assert reason in str(refused.value)


@pytest.fixture
async def app(tmp_path, claude_bin, agent_env, workdir):
    settings = Settings(
        _env_file=None,
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER}),
        data_dir=tmp_path / "data",
        claude_bin=claude_bin,
        workdir=workdir,
        outbox_chat_interval_s=0,
    )  # type: ignore[call-arg]
    async with app_in_own_task(settings, session=RecordingSession(), environ=agent_env) as app:
        yield app


async def test_inbox_file_becomes_a_task_and_comes_back_finished(app, anthropic, tmp_path):
    anthropic.script("MARK-INBOX", [{"text": "README tidied: 3 sections."}])
    inbox = tmp_path / "data" / "inbox"
    (inbox / ".half-written.md.part").write_text("---\n")  # not yet renamed: left alone
    staged = inbox / ".tidy.tmp"
    staged.write_text(DROPPED.format(chat=OWNER))
    staged.rename(inbox / "tidy.md")  # how any program drops a file: write, then rename
    await app.intake.poll_once()
    task = await app.store.tasks.get(1)
    assert task is not None and task.slug == "tidy-the-readme" and task.preset == "sonnet"
    assert (inbox / "accepted" / "1-tidy.md").exists() and not (inbox / "tidy.md").exists()
    assert (inbox / ".half-written.md.part").exists()
    async with asyncio.timeout(60):
        while (task := await app.store.tasks.get(1)).status.active:
            await asyncio.sleep(0.1)
    assert task.status is TaskStatus.DONE
    request = anthropic.requests_for("MARK-INBOX")[0]
    assert "Do not touch the code." in request["first_user_text"]  # constraints reach it
    await app.intake.poll_once()
    done = parse((inbox / "done" / "1-tidy-the-readme.md").read_text())
    assert done.goal == "MARK-INBOX Tidy the README.\nKeep it short."
    assert done.constraints == "- Do not touch the code.\n- English only."
    assert done.result == "README tidied: 3 sections."
    assert (done.status, done.chat_id, done.slug, done.model) == (
        "done",
        OWNER,
        "tidy-the-readme",
        "sonnet",
    )
    assert done.completed is not None and done.duration_seconds is not None
    await app.intake.poll_once()  # written once
    assert len(list((inbox / "done").iterdir())) == 1

    assert await app.outbox.idle(10)
    ack = next(t for t in app.bot.session.texts() if "tidy-the-readme" in t)
    assert "📥 from the task file <code>tidy.md</code>" in ack
    session = await feed(app, message("/export 1"))
    document = session.sent("SendDocument")[-1]
    assert document.document.filename == "1-tidy-the-readme.task.md"
    assert parse(document.document.data.decode()) == done


async def test_a_malformed_or_foreign_file_is_rejected_and_the_owner_told(app, tmp_path):
    inbox = tmp_path / "data" / "inbox"
    (inbox / "broken.md").write_text(f"---\nchat_id: {OWNER}\n---\n\n# Constraints\nnone\n")
    (inbox / "stranger.md").write_text(DROPPED.format(chat=999))
    (inbox / "badmodel.md").write_text(DROPPED.format(chat=OWNER).replace("sonnet", "gpt-9"))
    await app.intake.poll_once()
    assert await app.outbox.idle(10)
    assert await app.store.tasks.get(1) is None
    rejected = inbox / "rejected"
    assert sorted(p.name for p in rejected.iterdir()) == [
        "badmodel.md",
        "badmodel.md.reason.txt",
        "broken.md",
        "broken.md.reason.txt",
        "stranger.md",
        "stranger.md.reason.txt",
    ]
    assert "'# Goal' section is missing" in (rejected / "broken.md.reason.txt").read_text()
    assert "999 is not an allowed user" in (rejected / "stranger.md.reason.txt").read_text()
    assert "gpt-9" in (rejected / "badmodel.md.reason.txt").read_text()
    told = app.bot.session.texts()
    assert len(told) == 3 and all(m.startswith("📥") for m in told)
    assert any("broken.md" in m and "Goal" in m for m in told)
    assert {c.chat_id for c in app.bot.session.sent()} == {OWNER}  # never the stranger
