"""Sub-tasks for every engine: a Codex parent (the real codex app-server given `detach mcp
--parent` through its configuration) and a /local parent (the same server's tools,
``detach__start``…, in its tool list) each start a child in the running bot, wait for its
answer and use it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.models import TaskStatus
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.openai_mock import MODEL
from tests.support.processes import matching
from tests.test_local_engine import settings_for, tool, tool_results


@pytest.fixture
def chat() -> Iterator[ChatMock]:
    mock = ChatMock().start()
    yield mock
    mock.stop()


def outputs(request: dict[str, Any]) -> list[str]:
    """The tool results a Responses request carries (function_call_output items)."""
    found = []
    for item in request["input"]:
        if item.get("type") == "function_call_output":
            out = item.get("output")
            parts = out if isinstance(out, list) else [{"text": str(out)}]
            found.append("\n".join(str(p.get("text", "")) for p in parts))
    return found


def plain_model(codex_env: dict[str, str]) -> None:
    """A model Codex knows no metadata of: it lists MCP tools to the model (a model it knows,
    like gpt-5.5, finds them with its ``tool_search`` first, which a script cannot)."""
    config = Path(codex_env["CODEX_HOME"]) / "config.toml"
    config.write_text(config.read_text().replace(f'model = "{MODEL}"', 'model = "mock-plain"'))


async def test_a_codex_parent_starts_a_child_waits_for_it_and_uses_its_answer(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, openai, workdir
):
    openai.script(
        "MARK-CXPARENT",
        [
            {
                "call": "mcp__detach.start",
                "args": {"goal": "MARK-CXCHILD say it", "engine": "codex"},
            },
            {"call": "mcp__detach.wait", "args": {"task_id": 2, "timeout_s": 90}},
            {"text": "CXPARENT used the child's answer."},
        ],
    )
    openai.script("MARK-CXCHILD", [{"text": "CXCHILD says 42"}])
    plain_model(codex_env)
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin)
        async with running_bot(settings, {**agent_env, **codex_env}) as app:
            await fake.user_message("/codex subtasks=yes mode=ask MARK-CXPARENT go", OWNER)
            await fake.wait_text(OWNER, "CXPARENT used", timeout_s=90)
            child = await app.store.tasks.get(2)
            assert child.parent_id == 1 and child.engine == "codex"
            assert not [c for c in fake.calls if "wants to use" in str(c.params.get("text"))]
    requests = openai.requests_for("MARK-CXPARENT")
    assert '"task_id": 2' in outputs(requests[1])[-1]  # start's answer
    assert "CXCHILD says 42" in outputs(requests[2])[-1]


async def test_a_local_parent_starts_a_child_waits_for_it_and_uses_its_answer(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    """/local with subtasks=yes: `detach mcp --parent`'s tools in the model's tool list
    (``detach__start``…), called without asking; the child runs on /local too."""
    chat.script(
        "MARK-LPARENT",
        [
            tool("detach__start", goal="MARK-LCHILD say it", engine="local"),
            tool("detach__wait", task_id=2, timeout_s=90),
            {"text": "LPARENT used the child's answer."},
        ],
    )
    chat.script("MARK-LCHILD", [{"text": "LCHILD says 7"}])
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, chat)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/local subtasks=yes mode=ask MARK-LPARENT go", OWNER)
            await fake.wait_text(OWNER, "LPARENT used", timeout_s=90)
            child = await app.store.tasks.get(2)
            assert child.parent_id == 1 and child.engine == "local"
            assert not [c for c in fake.calls if "wants to use" in str(c.params.get("text"))]
    requests = chat.requests_for("MARK-LPARENT")
    assert {"detach__start", "detach__wait", "detach__report", "read_file"} <= set(
        requests[0]["tools"]
    )
    results = tool_results(requests[2])
    assert '"task_id": 2' in results[0]
    assert "LCHILD says 7" in results[1]
    assert "detach__report" in chat.requests_for("MARK-LCHILD")[0]["tools"]  # its own server


async def test_cancelling_a_local_parent_mid_wait_stops_the_tree_and_its_server(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    """/cancel of a /local parent blocked in ``detach__wait``: its child (stalled at the
    model) and the parent end cancelled, and the parent's `detach mcp` process is gone."""
    chat.script(
        "MARK-LCPARENT",
        [
            tool("detach__start", goal="MARK-LCCHILD slow", engine="local"),
            tool("detach__wait", task_id=2, timeout_s=100),
            {"text": "never"},
        ],
    )
    chat.script("MARK-LCCHILD", [{"delay": 30, "text": "too late"}])
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, chat)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/local subtasks=yes mode=ask MARK-LCPARENT go", OWNER)
            async with asyncio.timeout(60):  # the child at its model, the parent past start
                while not chat.requests_for("MARK-LCCHILD") or (
                    len(chat.requests_for("MARK-LCPARENT")) < 2
                ):
                    await asyncio.sleep(0.1)
            server = ("--parent 1", str(settings.data_dir.resolve()))
            assert matching(*server), "the parent's `detach mcp` runs before the cancel"
            await fake.user_message("/cancel 1", OWNER)
            async with asyncio.timeout(30):
                while [t.status for t in await app.store.tasks.list_for(OWNER, None, 5)] != [
                    TaskStatus.CANCELLED,
                    TaskStatus.CANCELLED,
                ]:
                    await asyncio.sleep(0.1)
            async with asyncio.timeout(15):
                while matching(*server):
                    await asyncio.sleep(0.1)
    assert len(chat.requests_for("MARK-LCPARENT")) == 2  # nothing after the wait
