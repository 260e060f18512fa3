"""A turn's `detach mcp` forked ahead of its agent (bot.zygote, bot.mcp.launch.Zygote.ahead):
the server starts while the agent's CLI does, and the relay the CLI starts is handed to it,
with real processes on a real SQLite file and the real pinned claude CLI. Only a relay that
is the same `detach mcp` (argv, directory, the environment its settings come from) is; any
other gets a fresh fork, as before; a fork nobody came for ends with its zygote."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from pathlib import Path

import pytest

from bot.mcp import relay
from bot.mcp.launch import Zygote, mcp_command, subtask_env
from bot.models import ApprovalMode, McpServerSpec, TurnSpec
from executors.claude import ClaudeExecutor
from executors.procs import RUN_ENV
from tests.test_claude_executor import collect
from tests.test_mcp_zygote import (
    BOUND_S,
    _a_task,
    _children,
    _gone,
    _opened,
    _served_then_gone,
    _server,
    _settings,
    _tools,
    zygote,
)


def _ask_ahead(settings, argv: list[str], env: dict[str, str], cwd: Path) -> None:  # type: ignore[no-untyped-def]
    """What Zygote.ahead sends: a header and no descriptors."""
    header = json.dumps({"ahead": True, "argv": argv, "env": env, "cwd": str(cwd)}).encode()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(BOUND_S)
        conn.connect(subtask_env(settings)["DETACH_MCP_ZYGOTE"])
        conn.sendall(len(header).to_bytes(4, "big") + header)


async def _one_child(zpid: int) -> int:
    deadline = time.monotonic() + BOUND_S
    while not (found := _children(zpid)):
        assert time.monotonic() < deadline, "no fork was made ahead"
        await asyncio.sleep(0.02)
    (child,) = found
    return child


async def test_the_relay_is_handed_to_the_fork_made_ahead_for_it(tmp_path):
    settings = _settings(tmp_path)
    task_id = await _a_task(settings)
    argv = ["mcp", "--task", str(task_id)]
    async with zygote(settings) as zpid:
        # the agent's tree has run tags of its own: they are not the server's settings
        _ask_ahead(settings, argv, {**subtask_env(settings), RUN_ENV: "x"}, settings.data_dir)
        ahead = await _one_child(zpid)
        relay = await _server(settings, task_id)
        try:
            assert "ask_owner" in await _tools(relay)
            assert _children(zpid) == {ahead}  # no fresh fork: the one made ahead serves
            await _served_then_gone(relay, ahead)
        finally:
            with contextlib.suppress(ProcessLookupError):
                relay.kill()


async def test_a_relay_that_is_another_server_gets_a_fresh_fork(tmp_path):
    """A setting, the directory, the task or anything else in the environment differing
    (a token only the relay has: the fork made ahead read the secrets it redacts without
    it): not the server made ahead."""
    settings = _settings(tmp_path)
    task_id = await _a_task(settings)
    other_task = await _a_task(settings)
    argv = ["mcp", "--task", str(task_id)]
    env = subtask_env(settings)
    relay_env = {**env, "GITHUB_TOKEN": "relay-only"}
    async with zygote(settings) as zpid:
        _ask_ahead(settings, argv, {**env, "DETACH_TIMEZONE": "Europe/Berlin"}, settings.data_dir)
        _ask_ahead(settings, argv, env, tmp_path)
        _ask_ahead(settings, ["mcp", "--task", str(other_task)], env, settings.data_dir)
        _ask_ahead(settings, argv, env, settings.data_dir)  # all but the token
        deadline = time.monotonic() + BOUND_S
        while len(waiting := _children(zpid)) < 4:
            assert time.monotonic() < deadline, waiting
            await asyncio.sleep(0.02)
        relay = await _server(settings, task_id, env=relay_env)
        try:
            assert "ask_owner" in await _tools(relay)
            (fresh,) = _children(zpid) - waiting
            assert os.readlink(f"/proc/{relay.pid}/fd/0") in _opened(fresh)
        finally:
            relay.kill()
            await relay.wait()
    for pid in waiting:  # nobody came for them: they end with their zygote
        assert await _gone(pid)


async def test_a_fork_made_ahead_that_failed_leaves_the_relay_a_fork_that_says_why(tmp_path):
    settings = _settings(tmp_path)
    await _a_task(settings)
    async with zygote(settings) as zpid:
        _ask_ahead(settings, ["mcp", "--task", "999"], subtask_env(settings), settings.data_dir)
        relay = await _server(settings, 999)  # before or after the fork found no such task
        _, said = await asyncio.wait_for(relay.communicate(b""), BOUND_S)
        assert relay.returncode != 0 and b"999" in said, said
        deadline = time.monotonic() + BOUND_S
        while _children(zpid):  # the fork made ahead ended, quietly
            assert time.monotonic() < deadline, _children(zpid)
            await asyncio.sleep(0.05)


@pytest.mark.parametrize("mode", [ApprovalMode.ASK, ApprovalMode.SANDBOX])
async def test_a_claude_turn_s_server_is_the_one_made_ahead(
    tmp_path, claude_bin, agent_env, anthropic, workdir, mode
):
    """With the real CLI: the environment it starts its server in is the one the bot said
    ahead (only one fork serves the turn, and none is left waiting after it)."""
    settings = _settings(tmp_path)
    task_id = await _a_task(settings)
    z = Zygote(settings)
    z.wanted()
    asked: list[McpServerSpec] = []

    def ahead(server: McpServerSpec, env, cwd: Path) -> None:  # type: ignore[no-untyped-def]
        asked.append(server)
        z.ahead(server, env, cwd)

    command = mcp_command()
    server = McpServerSpec(
        "detach", command[0], (*command[1:], "--task", str(task_id)), subtask_env(settings)
    )
    spec = TurnSpec(task_id, 1, "MARK-AHEAD go", workdir, approval_mode=mode, mcp_servers=(server,))
    anthropic.script("MARK-AHEAD", [{"text": "done"}])
    try:
        proc = await z._started  # type: ignore[misc]
        assert proc is not None
        socket_path = Path(subtask_env(settings)["DETACH_MCP_ZYGOTE"])
        deadline = time.monotonic() + BOUND_S
        while not socket_path.exists():
            assert time.monotonic() < deadline, "the zygote never listened"
            await asyncio.sleep(0.05)
        seen: dict[int, int] = {}  # the zygote's forks, and each one's start (clock ticks)
        relays: dict[int, int] = {}

        async def watch() -> None:
            while True:
                for pid in _children(proc.pid):
                    seen.setdefault(pid, _started_at(pid))
                for pid in _relays():
                    relays.setdefault(pid, _started_at(pid))
                await asyncio.sleep(0.01)

        watching = asyncio.create_task(watch())
        try:
            # what a person's environment has (the CLI passes it on as it is)
            env = {**agent_env, "XDG_CONFIG_HOME": str(tmp_path), "TZ": "Asia/Tokyo"}
            events = await collect(ClaudeExecutor(claude_bin, env, mcp_ahead=ahead), spec)
        finally:
            watching.cancel()
        assert events[-1].result_text == "done" and asked == [server]
        assert len(seen) == 1, seen  # one fork served the turn: none was made after it
        ((served, began),) = seen.items()
        (relay_began,) = relays.values()
        assert 0 < began < relay_began  # and it was made before the CLI started its relay
        assert await _gone(served)  # it ended with its relay: none is left waiting
        assert _children(proc.pid) == set()
    finally:
        await z.aclose()


def _started_at(pid: int) -> int:
    with contextlib.suppress(FileNotFoundError):
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[19])
    return -1


def _relays() -> list[int]:
    """The relays this test's agents started (another worker's tests run beside it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                mine = relay.__file__.encode() in (entry / "cmdline").read_bytes()
                if mine and _descends(int(entry.name), os.getpid()):
                    found.append(int(entry.name))
    return found


def _descends(pid: int, ancestor: int) -> bool:
    while pid > 1:
        status = Path(f"/proc/{pid}/status").read_text()
        pid = int(status.partition("\nPPid:")[2].split()[0])
        if pid == ancestor:
            return True
    return False


async def test_nothing_is_asked_ahead_before_the_zygote_runs_or_for_another_server(tmp_path):
    settings = _settings(tmp_path)
    z = Zygote(settings)
    server = McpServerSpec("detach", *mcp_command()[:1], (*mcp_command()[1:], "--task", "1"))
    z.ahead(server, {}, tmp_path)  # not started: nothing
    assert not z._asking
    z.wanted()
    try:
        await z._started  # type: ignore[misc]
        z.ahead(McpServerSpec("other", "/bin/true"), {}, tmp_path)
        assert not z._asking
        tree = McpServerSpec("detach", *mcp_command()[:1], (*mcp_command()[1:], "--parent", "1"))
        z.ahead(tree, {}, tmp_path)  # a sub-task tree's server: not yet (bot/mcp/launch.py)
        assert not z._asking
        z.ahead(server, {}, tmp_path)
        assert len(z._asking) == 1
    finally:
        await z.aclose()
