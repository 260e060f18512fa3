"""The MCP zygote (bot.zygote) and its relay (bot.mcp.relay), with real processes on a real
SQLite file: an agent's `detach mcp --task N` is a fork of the zygote that serves the same
tools on the relay's own descriptors, in the relay's environment; without a zygote the relay
becomes the plain `detach mcp`; the server ends with its relay (a killed agent leaves none);
only `mcp` is served; the zygote holds no secret and no database before a fork."""

from __future__ import annotations

import array
import asyncio
import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path

from bot.mcp.launch import Zygote, mcp_command, subtask_env
from bot.models import NewTask, TaskKind
from bot.store import Store
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, TOKEN, make_settings

BOUND_S = 30.0


def _settings(tmp_path: Path):  # type: ignore[no-untyped-def]
    return make_settings(tmp_path / "data", FakeTelegram(), "claude", tmp_path)


async def _a_task(settings) -> int:  # type: ignore[no-untyped-def]
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    store = await Store.open(settings.resolved_database_url)
    try:
        new = NewTask(OWNER, OWNER, "claude", TaskKind.DETACH, "goal", settings.data_dir)
        return (await store.tasks.create(new, "goal"))[0].id
    finally:
        await store.close()


@contextlib.asynccontextmanager
async def zygote(settings) -> AsyncIterator[int]:  # type: ignore[no-untyped-def]
    """A started zygote's pid, once its socket is there."""
    z = Zygote(settings)
    z.wanted()
    socket_path = Path(subtask_env(settings)["DETACH_MCP_ZYGOTE"])
    try:
        proc = await z._started  # type: ignore[misc]
        assert proc is not None
        deadline = time.monotonic() + BOUND_S
        while not socket_path.exists():
            assert time.monotonic() < deadline, "the zygote never listened"
            assert proc.returncode is None, "the zygote died"
            await asyncio.sleep(0.05)
        yield proc.pid
    finally:
        await z.aclose()
    assert not socket_path.exists()  # the socket goes with its zygote


async def _server(  # type: ignore[no-untyped-def]
    settings, task_id: int, cwd: Path | None = None, env: dict[str, str] | None = None
) -> asyncio.subprocess.Process:
    command = mcp_command()
    return await asyncio.create_subprocess_exec(
        *command,
        "--task",
        str(task_id),
        env=env or subtask_env(settings),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=str(cwd or settings.data_dir),
    )


async def _tools(proc: asyncio.subprocess.Process) -> list[str]:
    """initialize, then tools/list, over the server's stdio (JSON lines)."""
    assert proc.stdin is not None and proc.stdout is not None

    async def ask(message: dict) -> dict:
        proc.stdin.write((json.dumps(message) + "\n").encode())  # type: ignore[union-attr]
        await proc.stdin.drain()  # type: ignore[union-attr]
        while True:
            line = await asyncio.wait_for(proc.stdout.readline(), BOUND_S)  # type: ignore[union-attr]
            assert line, "the server closed its output"
            answer = json.loads(line)
            if answer.get("id") == message["id"]:
                return answer

    init = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    await ask({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init})
    proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    listed = await ask({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    return sorted(t["name"] for t in listed["result"]["tools"])


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found |= {int(c) for c in (task / "children").read_text().split()}
    return found


def _opened(pid: int) -> list[str]:
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            found.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return found


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


async def _served_then_gone(relay: asyncio.subprocess.Process, server: int) -> None:
    """``server`` reads the relay's stdin; the agent done (its stdin closed), the relay ends
    well and the server is gone."""
    assert os.readlink(f"/proc/{relay.pid}/fd/0") in _opened(server)
    relay.stdin.close()  # type: ignore[union-attr]
    assert await asyncio.wait_for(relay.wait(), BOUND_S) == 0
    assert await _gone(server)


async def _gone(pid: int) -> bool:
    deadline = time.monotonic() + BOUND_S
    while Path(f"/proc/{pid}").exists():
        with contextlib.suppress(FileNotFoundError):
            if Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z":
                return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def test_a_server_is_a_fork_of_the_zygote_serving_the_same_tools(tmp_path):
    settings = _settings(tmp_path)
    task_id = await _a_task(settings)
    plain = await _server(settings, task_id)  # no zygote yet: the relay became detach mcp
    try:
        expected = await _tools(plain)
        assert "notify" in expected and "ask_owner" in expected
        assert "bot" in _cmdline(plain.pid) and "mcp" in _cmdline(plain.pid)
        assert not any("relay" in part for part in _cmdline(plain.pid))
    finally:
        plain.kill()
        await plain.wait()
    async with zygote(settings) as zpid:
        before = _children(zpid)
        relay = await _server(settings, task_id)
        try:
            assert await _tools(relay) == expected
            forked = _children(zpid) - before
            assert len(forked) == 1  # the server answering is the zygote's fork
            assert relay.pid not in forked and any("relay" in p for p in _cmdline(relay.pid))
            (server,) = forked
            # the relay's descriptors: its stdin is what the server reads (the SDK moves it
            # off fd 0 while it serves)
            await _served_then_gone(relay, server)
        finally:
            with contextlib.suppress(ProcessLookupError):
                relay.kill()


async def test_a_killed_agent_leaves_no_server(tmp_path):
    settings = _settings(tmp_path)
    task_id = await _a_task(settings)
    async with zygote(settings) as zpid:
        relay = await _server(settings, task_id)
        await _tools(relay)
        (server,) = _children(zpid)
        relay.send_signal(signal.SIGKILL)  # as the agent's tree is killed at a turn's end
        await relay.wait()
        assert await _gone(server)


async def test_only_mcp_is_served_and_the_zygote_holds_no_secret(tmp_path):
    settings = _settings(tmp_path)
    async with zygote(settings) as zpid:
        path = subtask_env(settings)["DETACH_MCP_ZYGOTE"]
        assert os.stat(path).st_mode & 0o777 == 0o600
        r, w = os.pipe()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(BOUND_S)
                conn.connect(path)
                header = json.dumps({"argv": ["run"], "env": {}, "cwd": "/"}).encode()
                fds = array.array("i", [r, w, w]).tobytes()
                conn.sendmsg(
                    [len(header).to_bytes(4, "big") + header],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)],
                )
                assert conn.recv(1) == b"-"
        finally:
            os.close(r)
            os.close(w)
        assert _children(zpid) == set()
        environ = Path(f"/proc/{zpid}/environ").read_bytes()
        assert TOKEN.encode() not in environ and b"DETACH_ENV_FILE" not in environ
        assert not any("detach.sqlite" in target for target in _opened(zpid))


async def test_a_bot_package_the_agent_planted_in_its_directory_never_runs(tmp_path):
    """The server starts in the agent's directory: `python -m` would import a `bot` package
    found there first, as the bot, outside any sandbox. Neither the relay's plain fallback nor
    the zygote (started in the bot's own directory) ever does."""
    settings = _settings(tmp_path)
    task_id = await _a_task(settings)
    agents = tmp_path / "agents-dir"
    canary = tmp_path / "planted-ran"
    (agents / "bot").mkdir(parents=True)
    (agents / "bot" / "__init__.py").write_text(f"open({str(canary)!r}, 'w').write('x')\n")
    (agents / "bot" / "__main__.py").write_text(f"open({str(canary)!r}, 'w').write('x')\n")
    plain = await _server(settings, task_id, cwd=agents)  # no zygote: the fallback
    try:
        assert "notify" in await _tools(plain)
    finally:
        plain.kill()
        await plain.wait()
    cwd = os.getcwd()
    os.chdir(agents)  # the zygote starts where the bot runs: here, the planted directory
    try:
        async with zygote(settings):
            relay = await _server(settings, task_id, cwd=agents)
            try:
                assert "notify" in await _tools(relay)
            finally:
                relay.kill()
                await relay.wait()
    finally:
        os.chdir(cwd)
    assert not canary.exists()


async def test_a_zygote_asked_for_soon_starts_then_and_not_after_close(tmp_path):
    settings = _settings(tmp_path)
    socket_path = Path(subtask_env(settings)["DETACH_MCP_ZYGOTE"])
    early = Zygote(settings)
    early.soon(60.0)
    await early.aclose()  # closed before its time: nothing starts
    assert early._started is None
    z = Zygote(settings)
    z.soon(0.1)
    try:
        deadline = time.monotonic() + BOUND_S
        while not socket_path.exists():
            assert time.monotonic() < deadline, "the zygote never started"
            await asyncio.sleep(0.05)
    finally:
        await z.aclose()


async def test_a_fork_the_relay_gave_up_on_never_runs(tmp_path):
    """The relay waits ANSWER_S for the fork's yes, then runs the plain command on the same
    descriptors: a fork whose yes came too late must not run too (both would read the
    agent's stdin). It runs only on the relay's go."""
    settings = _settings(tmp_path)
    task_id = await _a_task(settings)
    async with zygote(settings) as zpid:
        path = subtask_env(settings)["DETACH_MCP_ZYGOTE"]
        r, w = os.pipe()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(BOUND_S)
                conn.connect(path)
                # where a running `detach mcp` would say at once that it finds no database
                empty = tmp_path / "empty"
                empty.mkdir()
                env = {**subtask_env(settings), "DETACH_DATA_DIR": str(empty)}
                env.pop("DETACH_ENV_FILE")  # (it names the bot's database)
                argv = ["mcp", "--task", str(task_id)]
                header = json.dumps({"argv": argv, "env": env, "cwd": str(tmp_path)}).encode()
                fds = array.array("i", [r, w, w]).tobytes()
                conn.sendmsg(
                    [len(header).to_bytes(4, "big") + header],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)],
                )
                assert conn.recv(1) == b"+"
                (fork,) = _children(zpid)
                await asyncio.sleep(0.5)  # time enough for a running command to say so
            # closed without a go: the fork ends having run nothing
            assert await _gone(fork)
            os.close(w)
            w = -1
            said = os.read(r, 1 << 16)
            assert said == b"", said  # it ran nothing: nothing on the agent's descriptors
        finally:
            os.close(r)
            if w >= 0:
                os.close(w)


FORK_IMPORTS = """
import json, os, sys
import bot.zygote
bot.zygote._preload()
before = set(sys.modules)
messages = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion":
     "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
]
r, w = os.pipe()
os.write(w, "".join(json.dumps(m) + "\\n" for m in messages).encode())
os.close(w)
os.dup2(r, 0)
answers = os.dup(1)
os.dup2(2, 1)  # the server's answers: out of the way
import bot.cli
try:
    bot.cli.main(["mcp", "--task", sys.argv[1]])
except SystemExit:
    pass
os.write(answers, json.dumps(sorted(set(sys.modules) - before)).encode())
"""


async def test_a_fork_imports_nothing_the_zygote_did_not(tmp_path):
    """What a forked server runs up to its tools/list was imported once, in the zygote
    (``_preload``): an import left to each fork costs every agent's start (the MCP SDK's
    asyncio backend and two of ours were: about 5 ms of ~33)."""
    settings = _settings(tmp_path)
    task_id = await _a_task(settings)
    proc = await asyncio.create_subprocess_exec(
        *(mcp_command()[0], "-c", FORK_IMPORTS, str(task_id)),
        env={**subtask_env(settings), "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), BOUND_S)
    assert json.loads(out) == []
