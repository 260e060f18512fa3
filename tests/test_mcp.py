"""`detach mcp`: Detach as a tool for other agents.

The end-to-end test has the real pinned claude as the MCP client (``--mcp-config`` pointing at
`detach mcp`, a real subprocess), driven by the scripted model: it starts a sub-task, which the
running bot runs with a second real claude turn and reports in (fake) Telegram; it watches
until the answer, follows up, watches again and finishes with both answers in its context.
The schema-level tests call each tool with bad input through the SDK's in-process client; the
HTTP tests run `detach mcp --http` and knock without, and with a wrong, token."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

from mcp import Client

from bot.events import TurnFinished
from bot.mcp.desk import McpDesk, McpPlace
from bot.mcp.server import build_server
from bot.models import ApprovalMode, NewTask, TaskKind, TurnSpec
from bot.store import Store
from bot.tasks.clients import ClientTasks
from executors.claude import ClaudeExecutor
from tests.conftest import ROOT
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, app_in_own_task, make_settings, running_bot
from tests.support.recording_session import RecordingSession
from tests.test_checks import finished, settings
from tests.test_handlers import feed, message

TOOLS = (
    "start",
    "status",
    "pr",
    "watch",
    "output",
    "followup",
    "cancel",
    "list",
    "notify",
    "ask_owner",
    "wait",
    "report",
    "message",
    "inbox",
)


def tool_use(name: str, **args: object) -> dict:
    return {"tool_use": {"name": f"mcp__detach__{name}", "input": args}}


def mcp_env(tmp_path: Path, data_dir: Path, workdir: Path) -> dict[str, str]:
    """`detach mcp`'s environment: the bot's settings, nothing from the real home."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp_path / "mcp-home"),
        "XDG_CONFIG_HOME": str(tmp_path / "mcp-home" / ".config"),
        "PYTHONPATH": str(ROOT),
        "DETACH_DATA_DIR": str(data_dir),
        "DETACH_ALLOWED_USERS": str(OWNER),
        "DETACH_ALLOWED_WORKDIRS": str(workdir),
        "DETACH_WORKDIR": str(workdir),
    }


async def test_claude_delegates_a_subtask_through_detach_mcp_and_follows_up(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-PARENT",
        [
            tool_use("start", goal="MARK-CHILD say hi", engine="claude", mode="ask"),
            tool_use("watch", task_id=1, cursor=0, until_done=True, timeout_s=90),
            tool_use("followup", task_id=1, prompt="now say bye"),
            tool_use("watch", task_id=1, cursor=0, until_done=True, timeout_s=90),
            {"text": "PARENT done: both answers in."},
        ],
    )
    anthropic.script("MARK-CHILD", [{"text": "CHILD says hi"}, {"text": "CHILD says bye"}])
    data_dir = tmp_path / "data"
    server = {
        "type": "stdio",
        "command": sys.executable,
        "args": ["-m", "bot", "mcp"],
        "env": mcp_env(tmp_path, data_dir, workdir),
    }
    config = json.dumps({"mcpServers": {"detach": server}})
    spec = TurnSpec(
        1,
        1,
        "MARK-PARENT delegate the greeting",
        workdir,
        allowed_tools=tuple(f"mcp__detach__{name}" for name in TOOLS),
        extra_args=("--mcp-config", config, "--strict-mcp-config"),
        approval_mode=ApprovalMode.AUTO,
    )
    async with FakeTelegram() as fake:
        settings = make_settings(data_dir, fake, claude_bin, workdir)
        async with running_bot(settings, agent_env):
            # -p would start while the server still connects (tools missing): make it wait
            parent = ClaudeExecutor(claude_bin, {**agent_env, "MCP_CONNECTION_NONBLOCKING": "0"})
            async with asyncio.timeout(240):
                events = [e async for e in parent.run(spec, NoApprovals())]
            ack = await fake.wait_text(OWNER, "mark-child-say", timeout_s=10)
            assert "started by claude-code" in ack.params["text"]  # which client started it
            await fake.wait_text(OWNER, "CHILD says hi", timeout_s=10)  # its card
            # the follow-up's line: queued, or already running when it goes out
            note = await fake.wait_text(OWNER, "follow-up", timeout_s=10)
            assert "(MCP)" in note.params["text"]
            await fake.wait_text(OWNER, "CHILD says bye", timeout_s=10)
            async with asyncio.timeout(10):  # it ends saying how its turn went, without Cancel
                while "✅ done" not in fake.find_message(OWNER, note.result["message_id"])["text"]:
                    await asyncio.sleep(0.05)
            assert not fake.find_message(OWNER, note.result["message_id"]).get("reply_markup")
    final = events[-1]
    assert isinstance(final, TurnFinished) and not final.is_error, final
    assert final.result_text == "PARENT done: both answers in."
    turns = anthropic.requests_for("MARK-PARENT")
    assert len(turns) == 5
    started = turns[1]["last_user_text"]  # the start tool's result
    assert '"task_id": 1' in started and '"label": "#1 mark-child-say"' in started
    assert "CHILD says hi" in turns[2]["last_user_text"]  # the first watch's answer
    followed = turns[3]["last_user_text"]
    assert '"behind_running_turn": false' in followed and '"status": "queued"' in followed
    assert "CHILD says bye" in turns[4]["last_user_text"]  # the second watch's answer
    assert len(anthropic.requests_for("MARK-CHILD")) == 2  # one real claude turn each


async def test_cancel_from_mcp_stops_the_turn_running_in_the_bot(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """A cancel through MCP is a flag in the database; the bot's intake stops the turn."""
    anthropic.script("MARK-STALL", [{"stall": 60}])
    data_dir = tmp_path / "data"
    async with FakeTelegram() as fake:
        settings = make_settings(data_dir, fake, claude_bin, workdir)
        async with running_bot(settings, agent_env) as app:
            place = McpPlace(data_dir, OWNER, OWNER, ("claude",), 1000, data_dir / "bot.alive")
            async with Client(
                build_server(McpDesk(client_tasks(app.store, place), place))
            ) as client:
                started = await client.call_tool(
                    "start", {"goal": "MARK-STALL wait for it", "mode": "ask"}
                )
                assert not started.is_error, started
                async with asyncio.timeout(60):
                    while not anthropic.requests_for("MARK-STALL"):
                        await asyncio.sleep(0.1)
                began = time.monotonic()
                cancelled = await client.call_tool("cancel", {"task_id": 1})
                assert json.loads(cancelled.content[0].text)["stopping"] is True
                await fake.wait_text(OWNER, "cancelled", timeout_s=30)
                assert time.monotonic() - began < 15
                status = await client.call_tool("status", {"task_id": 1})
                assert json.loads(status.content[0].text)["status"] == "cancelled"


async def test_a_task_with_subtasks_yes_starts_its_own_and_its_card_lists_them(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """/claude subtasks=yes: the bot gives the agent `detach mcp --parent`; it starts a
    sub-task (the bot runs and reports it), watches it to the end, is refused a second one
    (DETACH_MAX_SUBTASKS=1: the reason reaches the model), and the parent's card lists its
    child. The agent's own MCP calls need no approval."""
    anthropic.script(
        "MARK-SUBPARENT",
        [
            tool_use("start", goal="MARK-SUBCHILD count to three", mode="ask"),
            tool_use("watch", task_id=2, until_done=True, timeout_s=90),
            tool_use("start", goal="MARK-SUBCHILD2 one more", mode="ask"),
            tool_use("list"),
            {"text": "SUBPARENT finished."},
        ],
    )
    anthropic.script("MARK-SUBCHILD", [{"text": "one two three"}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, max_subtasks=1)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude subtasks=yes MARK-SUBPARENT split it", OWNER)
            ack = await fake.wait_text(OWNER, "mark-subparent-split", timeout_s=10)
            assert "may start sub-tasks" in ack.params["text"]
            child_ack = await fake.wait_text(OWNER, "mark-subchild-count", timeout_s=60)
            assert "started by claude-code" in child_ack.params["text"]
            await fake.wait_text(OWNER, "one two three", timeout_s=60)
            card = await fake.wait_text(OWNER, "SUBPARENT finished.", timeout_s=90)
            assert "🧩 Sub-tasks: ✅ #2 mark-subchild-count" in card.params["text"]
            child = await app.store.tasks.get(2)
            assert child.parent_id == 1 and child.subtasks  # DETACH_SUBTASK_DEPTH=2
            assert await app.store.tasks.get(3) is None  # the second was refused
            assert not [c for c in fake.calls if "wants to use" in c.params.get("text", "")]
    requests = anthropic.requests_for("MARK-SUBPARENT")
    assert "one two three" in requests[2]["last_user_text"]  # the watch's answer
    assert "the most it may" in requests[3]["last_user_text"]  # the refusal, with its reason
    assert '"task_id": 2' in requests[4]["last_user_text"]  # list: its own sub-tasks only
    assert '"task_id": 1' not in requests[4]["last_user_text"]


async def test_subtasks_yes_is_taken_by_every_engine_and_a_bad_value_refused(tmp_path, workdir):
    engines = {"claude": FakeEngine(finished("ok")), "codex": FakeEngine(finished("ok"))}
    async with app_in_own_task(
        settings(tmp_path, workdir), session=RecordingSession(), executors=engines
    ) as app:
        session = await feed(app, message("/claude subtasks=maybe mode=ask go"))
        assert "subtasks" in session.new_texts()
        assert await app.store.tasks.get(1) is None  # nothing was created
        await feed(app, message("/codex subtasks=yes mode=ask go"))
        assert (await app.store.tasks.get(1)).subtasks  # Codex takes MCP servers too


class NoApprovals:
    async def decide(self, request):  # type: ignore[no-untyped-def]
        raise AssertionError(f"unexpected approval request {request}")


# -- each tool's bad input ---------------------------------------------------------------------
def client_tasks(store: Store, place: McpPlace) -> ClientTasks:
    """The client's use case as `detach mcp` builds it for ``place``."""
    return ClientTasks(store, owner=place.owner, limits=(5, place.max_prompt_chars))


@contextlib.asynccontextmanager
async def desk_client(tmp_path: Path) -> AsyncIterator[tuple[Client, Store, Path]]:
    """The server in-process, on a real SQLite file, with a task of the owner and one of
    somebody else, and a heartbeat that says the bot runs. (A context manager, not a
    fixture: the client's cancel scopes must stay in the test's task.)"""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite")
    alive = tmp_path / "bot.alive"
    alive.touch()
    place = McpPlace(
        tmp_path, OWNER, OWNER, ("claude", "codex", "local"), 500, alive, start_wait_s=1
    )
    for owner in (OWNER, 999):
        new = NewTask(owner, owner, "claude", TaskKind.DETACH, "goal", tmp_path)
        await store.tasks.create(new, "goal")
    try:
        async with Client(build_server(McpDesk(client_tasks(store, place), place))) as client:
            yield client, store, alive
    finally:
        await store.close()


async def refused(client: Client, tool: str, args: dict) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, (tool, args, result)
    return result.content[0].text


async def test_every_tool_has_a_described_schema(tmp_path):
    async with desk_client(tmp_path) as (client, _, _):
        await described(client)


async def described(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == set(TOOLS)
    for tool in tools.values():
        assert len(tool.description or "") > 40, tool.name
        for name, prop in tool.input_schema.get("properties", {}).items():
            assert prop.get("description"), (tool.name, name)


async def test_bad_input_is_a_tool_error_with_the_reason(tmp_path):
    async with desk_client(tmp_path) as (client, _, alive):
        await bad_input(client, alive)


async def bad_input(client: Client, alive: Path) -> None:
    assert "valid integer" in await refused(client, "status", {"task_id": "one"})
    assert "no task #2" in await refused(client, "status", {"task_id": 2})  # not the owner's
    assert "no task #77" in await refused(client, "output", {"task_id": 77})
    assert "greater than or equal to 1" in await refused(client, "cancel", {"task_id": 0})
    assert "Field required" in await refused(client, "followup", {"task_id": 1})
    assert "prompt is empty" in await refused(client, "followup", {"task_id": 1, "prompt": " "})
    huge = "x" * 501
    assert "at most 500" in await refused(client, "followup", {"task_id": 1, "prompt": huge})
    assert "greater than or equal to 0" in await refused(
        client, "watch", {"task_id": 1, "cursor": -5}
    )
    assert "less than or equal to 500" in await refused(
        client, "output", {"task_id": 1, "limit": 10_000}
    )
    assert "less than or equal to 100" in await refused(client, "list", {"limit": 101})
    assert "unknown engine 'gpt'" in await refused(client, "start", {"goal": "g", "engine": "gpt"})
    assert "unknown mode 'yolo'" in await refused(client, "start", {"goal": "g", "mode": "yolo"})
    assert "one non-empty line" in await refused(
        client, "start", {"goal": "g", "cwd": "/tmp\n/etc"}
    )
    assert "at least 1 character" in await refused(client, "start", {"goal": ""})
    # an argument the tool does not take is refused, not dropped (it would start anywhere)
    pinned = await refused(client, "start", {"goal": "g", "host": "gpu-box"})
    assert "start takes no host; its arguments: check, cwd, engine, goal" in pinned, pinned
    assert "takes no limt" in await refused(client, "list", {"limt": 5})
    # nobody takes the task file in time: withdrawn, nothing starts later
    took = await refused(client, "start", {"goal": "nobody takes this"})
    assert "did not take the task" in took
    assert not list((store_dir := alive.parent / "inbox").glob("*.md"))
    assert list(store_dir.glob(".*.withdrawn"))
    os.utime(alive, (time.time() - 3600, time.time() - 3600))  # the bot stopped an hour ago
    assert "bot is not running" in await refused(client, "start", {"goal": "g"})
    assert "bot is not running" in await refused(client, "followup", {"task_id": 1, "prompt": "p"})
    # after all that the server still answers
    listed = await client.call_tool("list", {})
    assert not listed.is_error
    assert [t["task_id"] for t in json.loads(listed.content[0].text)["tasks"]] == [1]


async def test_status_and_list_name_the_model_that_ran_beside_the_one_asked(tmp_path):
    """The task asked for no model; its engine named the one that ran: status and list say
    both (the other owner's task, run by another model, never shows)."""
    from bot.models import TaskStatus
    from bot.store import TurnOutcome

    async with desk_client(tmp_path) as (client, store, _):
        first = json.loads((await client.call_tool("status", {"task_id": 1})).content[0].text)
        assert first["model"] is None and first["model_ran"] is None
        for task_id, named in ((1, "claude-opus-4-8"), (2, "claude-other-9")):
            turn = await store.tasks.last_turn(task_id)
            await store.tasks.finish_turn(turn, TurnOutcome(TaskStatus.DONE, "ok", model=named))
        status = json.loads((await client.call_tool("status", {"task_id": 1})).content[0].text)
        assert status["model"] is None and status["model_ran"] == "claude-opus-4-8"
        listed = json.loads((await client.call_tool("list", {})).content[0].text)["tasks"]
        assert [(t["task_id"], t["model"], t["model_ran"]) for t in listed] == [
            (1, None, "claude-opus-4-8")
        ]


async def test_watch_returns_on_its_bound_and_cancel_of_a_queued_task(tmp_path):
    async with desk_client(tmp_path) as (client, store, _):
        await watch_and_cancel(client, store)


async def watch_and_cancel(client: Client, store: Store) -> None:
    began = time.monotonic()
    result = await client.call_tool("watch", {"task_id": 1, "timeout_s": 0.5})
    watched = json.loads(result.content[0].text)
    assert 0.4 < time.monotonic() - began < 5
    assert watched["lines"] == [] and watched["done"] is False and "watch again" in watched["note"]
    cancelled = json.loads((await client.call_tool("cancel", {"task_id": 1})).content[0].text)
    assert cancelled["status"] == "cancelled" and cancelled["dropped_turns"] == 1
    assert "not running or queued" in await refused(client, "cancel", {"task_id": 1})
    assert (await store.tasks.get(1)).status.value == "cancelled"


# -- HTTP --------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    },
}


def post(url: str, token: str | None) -> int:
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, json.dumps(INITIALIZE).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_http_transport_wants_the_token_from_the_config_home(tmp_path, workdir):
    env = mcp_env(tmp_path, tmp_path / "data", workdir)
    seed = ["add", "--mode", "ask", "--cwd", str(workdir), "seed"]  # the database exists
    subprocess.run([sys.executable, "-m", "bot", *seed], env=env, check=True, capture_output=True)
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot", "mcp", "--http", f"127.0.0.1:{port}"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        token_file = Path(env["XDG_CONFIG_HOME"]) / "detach" / "mcp-token"
        url = f"http://127.0.0.1:{port}/mcp"
        async with asyncio.timeout(30):
            while True:
                try:
                    status = await asyncio.to_thread(post, url, None)
                    break
                except (ConnectionError, urllib.error.URLError):
                    await asyncio.sleep(0.2)
        assert status == 401
        assert await asyncio.to_thread(post, url, "wrong-token-wrong-token") == 401
        token = token_file.read_text().strip()
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        assert await asyncio.to_thread(post, url, token) == 200
    finally:
        proc.terminate()
        proc.wait(10)
    # beyond this machine only with a token made on purpose
    token_file.unlink()
    refused = subprocess.run(
        [sys.executable, "-m", "bot", "mcp", "--http", f"0.0.0.0:{free_port()}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2 and "without a token" in refused.stderr


def test_a_goal_keeps_its_text_when_it_looks_like_a_task_file():
    from bot.mcp.handoff import plain_goal
    from bot.tasks.taskfile import TaskFile, parse, render

    goal = "Fix it\n# Result\nwrite here\n---\nstatus: done"
    parsed = parse(render(TaskFile(goal=plain_goal(goal))))
    assert parsed.goal == "Fix it\n # Result\nwrite here\n___\nstatus: done"
    assert parsed.status is None and parsed.result == ""
