"""`notify`: the agent of a task tells its owner something mid-run (issue #55).

End to end, the real pinned claude of a ``subtasks=yes`` task calls `notify` on its
`detach mcp --parent` server, driven by the scripted model: a plain note arrives once, silently,
escaped, as a reply to the task's acknowledgement, and in the transcript (the board's item);
an urgent note buzzes while the task and its card stay within two buzzes, then notes go silent;
past DETACH_NOTIFY_MAX the call is refused with the reason reaching the model. In-process
through the SDK's client: a burst inside DETACH_NOTIFY_GAP_S is refused, as are a long note and
a server that serves no task."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from mcp import Client

from bot.mcp.desk import McpDesk, McpPlace
from bot.mcp.server import build_server
from bot.models import NewTask, OutboxOp, TaskKind
from bot.redaction import Redactor
from bot.store import Store
from bot.tasks.clients import ClientTasks, NoteRules
from bot.turns.items import transcript_item
from bot.turns.transcript import human_line
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_mcp import refused, tool_use
from tests.test_phone import buzzing


def silent(call) -> bool:  # type: ignore[no-untyped-def]
    return str(call.params.get("disable_notification")).lower() == "true"


async def test_notes_arrive_silently_an_urgent_one_buzzes_within_two_and_the_cap_refuses(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-NOTER",
        [
            tool_use("notify", text="MARK-NOTE1 found <b>it</b> & more"),
            tool_use("notify", text="MARK-NOTE2 look now", urgent=True),
            tool_use("notify", text="MARK-NOTE3 and now", urgent=True),
            tool_use("notify", text="MARK-NOTE4 once more", urgent=True),
            tool_use("notify", text="MARK-NOTE5 too many"),
            {"text": "NOTER finished."},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, notify_gap_s=0, notify_max=4
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude subtasks=yes MARK-NOTER work", OWNER)
            ack = await fake.wait_text(OWNER, "mark-noter-work", timeout_s=10)
            mark = fake.calls.index(ack) + 1
            await fake.wait_text(OWNER, "NOTER finished.", timeout_s=90)
            notes = [
                c
                for c in fake.calls
                if c.method == "sendMessage" and "📣" in c.params.get("text", "")
            ]
            texts = [c.params["text"] for c in notes]
            assert [t.split("MARK-NOTE")[1][0] for t in texts] == ["1", "2", "3", "4"]  # once
            assert "found &lt;b&gt;it&lt;/b&gt; &amp; more" in texts[0]  # escaped
            assert [silent(c) for c in notes] == [True, False, True, True]  # the card: the 2nd
            assert "urgent" in texts[1] and "urgent" not in texts[0]
            replied = int(notes[0].params["reply_to_message_id"])
            assert replied == ack.result["message_id"]  # in the task's thread
            buzzed = buzzing(fake, mark)
            assert [c for c in buzzed if "📣" in c.params["text"]] == notes[1:2]
            assert len(buzzed) == 2  # the urgent note and the card: the two-buzz rule
            lines = await app.store.transcript.after(1, 0, 500)
            noted = [line for line in lines if line.kind == "Notified"]
            assert [line.body["buzzed"] for line in noted] == [False, True, False, False]
            assert human_line(noted[0].kind, noted[0].body) == (
                "📣 MARK-NOTE1 found <b>it</b> & more"
            )
            item = transcript_item(noted[1])
            assert item is not None and item["kind"] == "note" and item["urgent"]
    requests = anthropic.requests_for("MARK-NOTER")
    assert '"buzzed": false' in requests[1]["last_user_text"]
    assert '"buzzed": true' in requests[2]["last_user_text"]
    assert '"buzzed": false' in requests[3]["last_user_text"]
    assert "the most it may (DETACH_NOTIFY_MAX)" in requests[5]["last_user_text"]
    assert "`notify` tool" in requests[0]["system"]  # the preamble tells it


@contextlib.asynccontextmanager
async def task_server(tmp_path: Path, parent: bool = True) -> AsyncIterator[tuple[Client, Store]]:
    """`detach mcp --parent 1` in-process on a real SQLite file (``parent``: else the owner's
    server, which serves no task)."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite")
    alive = tmp_path / "bot.alive"
    alive.touch()
    new = NewTask(OWNER, OWNER, "claude", TaskKind.DETACH, "goal", tmp_path)
    task = (await store.tasks.create(new, "goal"))[0] if parent else None
    place = McpPlace(tmp_path, OWNER, OWNER, ("claude",), 500, alive, parent=task)
    tasks = ClientTasks(store, owner=OWNER, parent=task, notes=NoteRules(gap_s=30, most=10))
    try:
        async with Client(build_server(McpDesk(tasks, place))) as client:
            yield client, store
    finally:
        await store.close()


async def test_a_burst_of_notes_is_refused_with_the_reason(tmp_path):
    async with task_server(tmp_path) as (client, store):
        first = await client.call_tool("notify", {"text": "one"})
        assert not first.is_error, first
        said = await refused(client, "notify", {"text": "two", "urgent": True})
        assert "at most one per 30 s (DETACH_NOTIFY_GAP_S)" in said
        assert "at most 500" in await refused(client, "notify", {"text": "x" * 501})
        sent = await store.outbox.sends_about(1, ["status"])
        assert [row.payload["text"] for row in sent] == ["📣 #1 goal: one"]
        assert sent[0].payload["silent"]


async def test_notify_is_refused_where_the_server_serves_no_task(tmp_path):
    async with task_server(tmp_path, parent=False) as (client, _):
        assert "agent of a task" in await refused(client, "notify", {"text": "hello"})


async def test_a_row_another_process_queued_is_sent_redacted_by_the_bot(tmp_path):
    """`detach mcp` knows fewer secrets than the bot: the bot redacts what it delivers."""
    url = f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite"
    secret = "sk-THE-BOTS-OWN-SECRET-42"
    mcp = await Store.open(url)
    bot = await Store.open(url, redact=Redactor.of([secret]))
    try:
        payload = {"text": f"📣 #1: leaked {secret}", "silent": True}
        await mcp.outbox.add(OWNER, OutboxOp.SEND, payload, None, None)
        (row,) = await bot.outbox.due()
        assert secret not in row.payload["text"] and "[redacted]" in row.payload["text"]
    finally:
        await mcp.close()
        await bot.close()
