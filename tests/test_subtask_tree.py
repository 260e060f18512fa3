"""Sub-tasks of sub-tasks (DETACH_SUBTASK_DEPTH, default 2), with the real claude CLI against
the scripted model and the real `detach mcp --parent` at each level: the owner's task (auto)
starts a read-only child; the child, which gets a sub-task server of its own, is refused a
grandchild in ask mode (more than its own rights, though the root could give it) and starts a
read-only one, which gets no server (the deepest level); each waits for its child's answer."""

from __future__ import annotations

from bot.models import ApprovalMode
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
            tool_use("watch", task_id=3, until_done=True, timeout_s=90),
            tool_use("list"),
            {"text": "DKID done."},
        ],
    )
    anthropic.script("MARK-DGRAND", [{"text": "DGRAND says three"}])
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
            assert kid.approval_mode is grand.approval_mode is ApprovalMode.READONLY
    kid_answers = [r["last_user_text"] for r in anthropic.requests_for("MARK-DKID")]
    assert "may not run in ask mode" in kid_answers[1]  # capped by the child, not the root
    assert '"task_id": 3' in kid_answers[2]
    assert "DGRAND says three" in kid_answers[3]
    assert '"task_id": 3' in kid_answers[4] and '"task_id": 2' not in kid_answers[4]
    assert "DKID done." in anthropic.requests_for("MARK-DROOT")[2]["last_user_text"]
    assert len(anthropic.requests_for("MARK-DGRAND")) == 1
