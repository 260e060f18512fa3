"""Sub-tasks of sub-tasks (DETACH_SUBTASK_DEPTH, default 2), with the real claude CLI against
the scripted model and the real `detach mcp --parent` at each level: the owner's task (auto)
starts a read-only child; the child, which gets a sub-task server of its own, is refused a
grandchild in ask mode (more than its own rights, though the root could give it) and starts a
read-only one, which may start none (the deepest level) but reports to it; each waits for its
child's answer (``wait``) and the child reads the report (``inbox``)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from mcp import Client

from bot.board.views import as_tree
from bot.mcp.desk import McpDesk, McpPlace
from bot.mcp.server import build_server
from bot.models import ApprovalMode, NewTask, TaskKind, TaskStatus
from bot.store import Store
from bot.tasks.clients import ClientTasks, TurnPool
from bot.turns.transcript import human_line
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_mcp import tool_use


async def test_a_grandchild_is_capped_by_its_parent_and_starts_none(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-DROOT",
        [
            tool_use("start", goal="MARK-DKID split it again", mode="readonly"),
            tool_use("watch", task_id=2, until_done=True, timeout_s=110),
            {"text": "DROOT done."},
        ],
    )
    anthropic.script(
        "MARK-DKID",
        [
            tool_use("start", goal="MARK-DASK climb", mode="ask"),
            tool_use("start", goal="MARK-DGRAND count", mode="readonly"),
            tool_use("wait", task_id=3, timeout_s=90),
            tool_use("inbox"),
            tool_use("list"),
            {"text": "DKID done."},
        ],
    )
    anthropic.script(
        "MARK-DGRAND",
        [
            tool_use("start", goal="MARK-DGREAT deeper"),
            tool_use("report", text="DGRAND-REPORT halfway"),
            {"text": "DGRAND says three"},
        ],
    )
    async with FakeTelegram() as fake:
        # a waiting parent holds its slot: three levels need three turns at once
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, max_concurrent_turns=3
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude subtasks=yes mode=auto MARK-DROOT go", OWNER)
            await fake.wait_text(OWNER, "DROOT done.", timeout_s=110)
            root, kid, grand = [await app.store.tasks.get(n) for n in (1, 2, 3)]
            assert await app.store.tasks.get(4) is None  # the escalation started nothing
            assert kid.parent_id == 1 and kid.subtasks  # depth 1 < 2: a server of its own
            assert grand.parent_id == 2 and not grand.subtasks  # depth 2: the deepest
            assert await app.store.tasks.get(4) is None  # nor a great-grandchild
            assert kid.approval_mode is grand.approval_mode is ApprovalMode.READONLY
    kid_answers = [r["last_user_text"] for r in anthropic.requests_for("MARK-DKID")]
    assert "may not run in ask mode" in kid_answers[1]  # capped by the child, not the root
    assert '"task_id": 3' in kid_answers[2]
    assert "DGRAND says three" in kid_answers[3] and '"done": true' in kid_answers[3]
    assert "DGRAND-REPORT halfway" in kid_answers[4]  # the grandchild's report, read
    assert '"task_id": 3' in kid_answers[5] and '"task_id": 2' not in kid_answers[5]
    assert "DKID done." in anthropic.requests_for("MARK-DROOT")[2]["last_user_text"]
    grand_answers = [r["last_user_text"] for r in anthropic.requests_for("MARK-DGRAND")]
    assert "at the deepest level" in grand_answers[1]  # no great-grandchild
    assert '"reported_to": 2' in grand_answers[2]


async def test_siblings_message_each_other_through_their_parent_only(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """Two children of one parent: A messages B (kept in B's transcript, read by B's
    ``inbox``), is refused a message to its parent and to itself, and reports to the parent,
    which reads the report with ``inbox``."""
    anthropic.script(
        "MARK-SROOT",
        [
            tool_use("start", goal="MARK-SIBB wait for word", mode="readonly"),
            tool_use("start", goal="MARK-SIBA tell B", mode="readonly"),
            tool_use("wait", task_id=3, timeout_s=90),
            tool_use("inbox"),
            {"text": "SROOT done."},
        ],
    )
    anthropic.script("MARK-SIBB", [{"text": "SIBB idle"}])
    anthropic.script(
        "MARK-SIBA",
        [
            tool_use("message", task_id=2, text="SIB-HELLO from A"),
            tool_use("message", task_id=1, text="to my parent"),
            tool_use("message", task_id=3, text="to myself"),
            tool_use("report", text="SIB-REPORT told B"),
            {"text": "SIBA done."},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, max_concurrent_turns=3
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude subtasks=yes mode=auto MARK-SROOT go", OWNER)
            await fake.wait_text(OWNER, "SROOT done.", timeout_s=110)
            b_inbox = await inbox_of(app.store, tmp_path / "data", 2)
            shown = [human_line(x.kind, x.body) for x in await app.store.transcript.after(2, 0)]
            assert "📨 message from #3 mark-siba-tell: SIB-HELLO from A" in shown  # watch, board
    a_answers = [r["last_user_text"] for r in anthropic.requests_for("MARK-SIBA")]
    assert '"sent_to": 2' in a_answers[1]
    assert "#1 is no sibling" in a_answers[2] and "Nothing was sent" in a_answers[2]
    assert "#3 is no sibling" in a_answers[3]
    assert '"reported_to": 1' in a_answers[4]
    root_answers = [r["last_user_text"] for r in anthropic.requests_for("MARK-SROOT")]
    assert "SIB-REPORT told B" in root_answers[4] and "SIB-HELLO" not in root_answers[4]
    assert [n["text"] for n in b_inbox["notes"]] == ["SIB-HELLO from A"]
    assert b_inbox["notes"][0]["from"] == 3 and b_inbox["notes"][0]["kind"] == "messaged"


async def inbox_of(store, data_dir: Path, task_id: int) -> dict:  # type: ignore[no-untyped-def]
    """What ``inbox`` answers the agent of ``task_id`` (its own server's desk, in-process)."""
    place = McpPlace(data_dir, OWNER, OWNER, ("claude",), 1000, data_dir / "bot.alive")
    tasks = await ClientTasks(store, owner=OWNER).scoped_to(task_id)
    async with Client(build_server(McpDesk(tasks, place))) as client:
        result = await client.call_tool("inbox", {"cursor": 0})
    return json.loads(result.content[0].text)


async def test_cancelling_the_parent_stops_its_whole_tree(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """The owner's /cancel of the root: the grandchild's stalled turn, the child and the root,
    all waiting on each other, end cancelled within seconds."""
    anthropic.script(
        "MARK-CROOT",
        [
            tool_use("start", goal="MARK-CKID go on", mode="ask"),
            tool_use("wait", task_id=2, timeout_s=100),
            {"text": "CROOT never"},
        ],
    )
    anthropic.script(
        "MARK-CKID",
        [
            tool_use("start", goal="MARK-CGRAND stall", mode="ask"),
            tool_use("wait", task_id=3, timeout_s=100),
            {"text": "CKID never"},
        ],
    )
    anthropic.script("MARK-CGRAND", [{"stall": 60}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, max_concurrent_turns=3
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude subtasks=yes mode=ask MARK-CROOT go", OWNER)
            async with asyncio.timeout(60):
                while not anthropic.requests_for("MARK-CGRAND"):
                    await asyncio.sleep(0.1)
            began = time.monotonic()
            await fake.user_message("/cancel 1", OWNER)
            async with asyncio.timeout(30):
                while True:
                    tree = [await app.store.tasks.get(n) for n in (1, 2, 3)]
                    if all(t.status is TaskStatus.CANCELLED for t in tree):
                        break
                    await asyncio.sleep(0.1)
            assert time.monotonic() - began < 30
            assert await app.store.audit.count("task_cancelled", OWNER) == 3
    assert not anthropic.requests_for("MARK-CROOT")[-1]["last_user_text"].count("CKID never")


def test_the_board_lists_a_tree_under_its_root_with_its_depth():
    rows = [  # newest first, as the store lists them
        {"id": 6, "parent_id": None},
        {"id": 5, "parent_id": 2},
        {"id": 4, "parent_id": 3},
        {"id": 3, "parent_id": 1},
        {"id": 2, "parent_id": 1},
        {"id": 1, "parent_id": None},
        {"id": 9, "parent_id": 8},  # its parent is not listed (archived): a root
    ]
    tree = [(r["id"], r["depth"]) for r in as_tree(rows)]
    assert tree == [(6, 0), (1, 0), (2, 1), (5, 2), (3, 1), (4, 2), (9, 0)]


async def test_wait_says_when_its_child_starves_behind_waiting_parents(tmp_path):
    """One turn slot, taken by the parent that waits: its child stays queued, and ``wait``
    says so soon instead of holding the slot for its whole timeout."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite")
    try:
        root = NewTask(OWNER, OWNER, "claude", TaskKind.DETACH, "root", tmp_path, subtasks=True)
        await store.tasks.create(root, "root")
        await store.tasks.set_status(1, TaskStatus.RUNNING)
        child = NewTask(OWNER, OWNER, "claude", TaskKind.DETACH, "kid", tmp_path, parent_id=1)
        await store.tasks.create(child, "kid")
        pool = TurnPool(max_turns=1, starved_after_s=0.5)
        tasks = await ClientTasks(store, owner=OWNER, pool=pool).scoped_to(1)
        place = McpPlace(tmp_path, OWNER, OWNER, ("claude",), 1000, tmp_path / "bot.alive")
        began = time.monotonic()
        async with Client(build_server(McpDesk(tasks, place))) as client:
            result = await client.call_tool("wait", {"task_id": 2, "timeout_s": 60})
        found = json.loads(result.content[0].text)
        assert time.monotonic() - began < 10
        assert found["done"] is False and found["status"] == "queued"
        assert "every turn slot" in found["note"]
        await store.tasks.set_status(2, TaskStatus.DONE)
        async with Client(build_server(McpDesk(tasks, place))) as client:
            result = await client.call_tool("wait", {"task_id": 2, "timeout_s": 60})
        assert json.loads(result.content[0].text)["done"] is True
    finally:
        await store.close()
