"""/local's tools against a hostile model: a symlink out of the task's directory (a cloned
repository's ``settings.link -> ~/.config/detach/env``), writes into ``.git``, a catastrophic
regular expression, a 5 MB streamed argument, numbers of 400 digits. Through the real tool code,
and through the real /local engine (the real bot, the scripted Chat Completions server): the
canary never reaches the model, the event loop keeps ticking, every bad call is a tool error
and the turn goes on."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.app import App
from executors.local_tools import Call, ToolBox, ToolFailed, parse_call
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

SECRET = "123456:canary-never-to-the-model"
CANARY = f"DETACH_BOT_TOKEN={SECRET}"
REDOS = "^(a+)+$"
HUGE = "1" + "0" * 400  # 400 digits: float() of it overflows


async def _no_command(command: str, timeout_s: float | None) -> tuple[int | None, str]:
    raise AssertionError("no command runs here")


@pytest.fixture
def chat() -> object:
    mock = ChatMock().start()
    yield mock
    mock.stop()


@pytest.fixture
def planted(tmp_path: Path, workdir: Path) -> Path:
    """A task directory holding links out: to the settings file, to a folder, to /etc/passwd;
    and one link inside (which works)."""
    secrets = tmp_path / "config" / "detach"
    secrets.mkdir(parents=True)
    (secrets / "env").write_text(f"{CANARY}\n")
    (workdir / "settings.link").symlink_to(secrets / "env")
    (workdir / "config.dir").symlink_to(secrets)
    (workdir / "passwd").symlink_to("/etc/passwd")
    (workdir / "notes.txt").write_text("token: look elsewhere\n")
    (workdir / "notes.link").symlink_to(workdir / "notes.txt")
    return workdir


class LoopWatch:
    """How long the event loop went without running a 10 ms ticker: its longest stall."""

    def __init__(self) -> None:
        self.max_stall_s = 0.0

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[LoopWatch]:
        async def tick() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                self.max_stall_s = max(self.max_stall_s, now - last - 0.01)
                last = now

        ticker = asyncio.create_task(tick())
        try:
            yield self
        finally:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker


# -- the tools themselves -------------------------------------------------------------------------


async def test_a_symlink_out_is_never_read_by_grep_list_or_read(planted):
    box = ToolBox(planted, _no_command)
    found = await box.run(Call("1", "grep", {"pattern": "canary|token|root"}))
    assert SECRET not in found and "root:" not in found
    assert "notes.txt:1: token: look elsewhere" in found and "notes.link:1:" in found
    listing = await box.run(Call("2", "list_files", {}))
    assert listing.split("\n") == ["notes.link", "notes.txt"]
    for path in ("settings.link", "config.dir/env", "passwd"):
        for tool, args in (("read_file", {}), ("grep", {"pattern": "."})):
            with pytest.raises(ToolFailed, match="outside the working directory"):
                await box.run(Call("3", tool, {"path": path, **args}))
    assert await box.run(Call("4", "read_file", {"path": "notes.link"})) == "token: look elsewhere"


async def test_denied_paths_inside_the_directory_are_out_of_every_tool(workdir):
    """A task working in the home directory: ``~/.ssh`` and the settings folder (on the turn's
    deny list) are neither read, written, listed nor searched; the rest of the home works."""
    (workdir / ".ssh").mkdir()
    (workdir / ".ssh" / "id_ed25519").write_text(f"{CANARY}\n")
    (workdir / ".config" / "detach").mkdir(parents=True)
    (workdir / ".config" / "detach" / "env").write_text(f"{CANARY}\n")
    (workdir / "key.link").symlink_to(workdir / ".ssh" / "id_ed25519")
    (workdir / "notes.txt").write_text("token: look elsewhere\n")
    denied = (workdir / ".ssh", workdir / ".config" / "detach", Path("/elsewhere/denied"))
    box = ToolBox(workdir, _no_command, denied)
    found = await box.run(Call("1", "grep", {"pattern": "canary|token"}))
    assert SECRET not in found and "notes.txt:1:" in found
    assert await box.run(Call("2", "list_files", {})) == "notes.txt"
    for path in (".ssh/id_ed25519", ".config/detach/env", "key.link", ".ssh"):
        with pytest.raises(ToolFailed, match="denied to tasks"):
            await box.run(Call("3", "read_file", {"path": path}))
    with pytest.raises(ToolFailed, match="denied to tasks"):
        await box.run(Call("4", "write_file", {"path": ".ssh/authorized_keys", "content": "k"}))
    assert not (workdir / ".ssh" / "authorized_keys").exists()
    assert await box.run(Call("5", "read_file", {"path": "notes.txt"})) == "token: look elsewhere"


async def test_writes_into_git_are_refused_wherever_they_point(workdir):
    (workdir / ".git" / "hooks").mkdir(parents=True)
    (workdir / "sub").mkdir()
    (workdir / "gitlink").symlink_to(workdir / ".git")
    box = ToolBox(workdir, _no_command)
    for path in (".git/config", ".git/hooks/pre-commit", "sub/.git/config", ".git", "gitlink/x"):
        with pytest.raises(ToolFailed, match="in .git, the repository's own data"):
            await box.run(Call("1", "write_file", {"path": path, "content": "[core]"}))
    (workdir / ".git" / "config").write_text("[core]\n")
    with pytest.raises(ToolFailed, match="in .git"):
        await box.run(
            Call("2", "edit_file", {"path": ".git/config", "old_text": "[", "new_text": "x"})
        )
    assert (workdir / ".git" / "config").read_text() == "[core]\n"
    assert not (workdir / "sub" / ".git").exists()
    assert "wrote .gitignore" in await box.run(
        Call("3", "write_file", {"path": ".gitignore", "content": "x\n"})
    )


async def test_a_fifo_is_refused_not_waited_on(workdir):
    os.mkfifo(workdir / "pipe")
    box = ToolBox(workdir, _no_command)
    async with asyncio.timeout(5):
        with pytest.raises(ToolFailed, match="not a regular file"):
            await box.run(Call("1", "read_file", {"path": "pipe"}))
        assert await box.run(Call("2", "grep", {"pattern": "x"})) == "(no matches)"


async def test_a_catastrophic_pattern_neither_hangs_nor_stalls_the_loop(workdir):
    """Python's re takes exponential time on ``^(a+)+$`` against 30 a's and a b (24 s
    measured in the bot); RE2 is linear, and the search runs in a worker thread."""
    (workdir / "bomb.txt").write_text("a" * 30 + "b\n")
    for n in range(300):
        (workdir / f"f{n}.txt").write_text("line\n" * 2000)
    box = ToolBox(workdir, _no_command)
    async with LoopWatch().watching() as watch:
        started = time.monotonic()
        assert await box.run(Call("1", "grep", {"pattern": REDOS})) == "(no matches)"
        assert time.monotonic() - started < 15  # Python's re: 24 s on the one line alone
    assert watch.max_stall_s < 0.5, watch.max_stall_s
    with pytest.raises(ToolFailed, match="RE2 syntax: no look-around"):
        await box.run(Call("2", "grep", {"pattern": "(?=x)a"}))


@pytest.mark.parametrize(
    ("tool", "args", "words"),
    [
        ("run", {"command": "true", "timeout_s": int(HUGE)}, "timeout_s must be a number"),
        ("run", {"command": "true", "timeout_s": float("nan")}, "timeout_s must be a number"),
        ("run", {"command": "true", "timeout_s": "soon"}, "timeout_s must be a number"),
        ("run", {"command": "true", "timeout_s": -5}, "timeout_s must be a number"),
        ("read_file", {"path": "a.txt", "offset": int(HUGE)}, "offset must be a number"),
        ("read_file", {"path": "a.txt", "limit": 1e308}, "limit must be a number"),
        ("read_file", {"path": "a.txt", "offset": True}, "offset must be a number"),
    ],
)
async def test_numbers_out_of_bounds_are_tool_errors(workdir, tool, args, words):
    (workdir / "a.txt").write_text("one\ntwo\n")
    box = ToolBox(workdir, _no_command)
    with pytest.raises(ToolFailed, match=words):
        await box.run(Call("1", tool, args))


async def test_in_bounds_numbers_still_work(workdir):
    (workdir / "a.txt").write_text("one\ntwo\nthree\n")
    box = ToolBox(workdir, _no_command)
    assert await box.run(Call("1", "read_file", {"path": "a.txt", "offset": 2, "limit": 1})) == (
        "two"
    )
    assert await box.run(Call("2", "read_file", {"path": "a.txt", "offset": "3"})) == "three"


def test_arguments_json_that_python_cannot_read_is_a_tool_error():
    call = parse_call("1", "run", f'{{"command": "true", "timeout_s": {HUGE}}}')
    assert call.args["timeout_s"] == int(HUGE)  # read; refused when run (above)
    for raw in ('{"timeout_s": ' + "9" * 5000 + "}", "[" * 100_000):
        with pytest.raises(ToolFailed, match="cannot be read"):
            parse_call("2", "run", raw)


# -- the real /local engine -----------------------------------------------------------------------


async def warmed(fake: FakeTelegram, app: App) -> None:
    """One exchange with the bot before its loop is watched: aiogram's types are built at their
    first use in a process (bot/lazy_types.py: Update and Message, 0.1 to 0.3 s each, once),
    a cost of the process's first update and message, not of the turn watched."""
    await fake.user_message("/help", OWNER)
    await fake.wait_call("sendMessage")
    assert await app.outbox.idle(10)  # its answer read too


def tool(name: str, **args: object) -> dict:
    return {"tools": [{"name": name, "args": args}]}


def tool_results(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_a_local_turn_never_sees_the_canary_and_the_loop_keeps_ticking(
    tmp_path, claude_bin, agent_env, planted, chat
):
    """A sandboxed /local turn greps (no path), lists, reads the link, greps a catastrophic
    pattern, writes .git/config and sends a 400-digit timeout: each is refused or harmless,
    the canary reaches no request, and the bot's loop never stalls."""
    (planted / "bomb.txt").write_text("a" * 30 + "b\n")
    chat.script(
        "MARK-HOSTILE",
        [
            tool("grep", pattern="(?i)token"),
            tool("list_files"),
            tool("read_file", path="settings.link"),
            tool("grep", pattern=REDOS),
            tool("write_file", path=".git/config", content="[core]\n\tfsmonitor = touch x\n"),
            {"tools": [{"name": "run", "raw_args": f'{{"command": "true", "timeout_s": {HUGE}}}'}]},
            {"text": "looked around"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, planted, local_base_url=chat.base_url
        )
        async with running_bot(settings, agent_env) as app:
            await warmed(fake, app)
            async with LoopWatch().watching() as watch:
                await fake.user_message("/detach engine=local MARK-HOSTILE look around", OWNER)
                await fake.wait_text(OWNER, "looked around", timeout_s=60)
    requests = chat.requests_for("MARK-HOSTILE")
    assert SECRET not in json.dumps(requests)
    results = tool_results(requests[-1])
    assert "notes.txt:1: token" in results[0] and "settings.link" not in results[1]
    assert "outside the working directory" in results[2]
    assert results[3] == "(no matches)"
    assert "in .git, the repository's own data" in results[4]
    assert "timeout_s must be a number" in results[5]
    assert not (planted / ".git").exists()
    assert watch.max_stall_s < 0.5, watch.max_stall_s


async def test_a_5_mb_streamed_argument_ends_in_a_tool_error_in_bounded_time(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    """5 MB of arguments in 1,000-character pieces: read up to the 1,000,000-character cap
    (joined once), the call refused with a clear error, the turn goes on."""
    content = "x" * 5_000_000
    raw = json.dumps({"path": "big.txt", "content": content})
    chat.script(
        "MARK-BIG",
        [
            {"tools": [{"name": "write_file", "raw_args": raw, "piece": 1000}]},
            {"text": "wrote it smaller"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, local_base_url=chat.base_url
        )
        async with running_bot(settings, agent_env) as app:
            await warmed(fake, app)
            async with LoopWatch().watching() as watch:
                started = time.monotonic()
                await fake.user_message("/detach engine=local MARK-BIG write a big file", OWNER)
                await fake.wait_text(OWNER, "wrote it smaller", timeout_s=60)
                elapsed_s = time.monotonic() - started
    assert elapsed_s < 30, elapsed_s
    assert watch.max_stall_s < 0.5, watch.max_stall_s
    second = chat.requests_for("MARK-BIG")[-1]
    assert tool_results(second)[0].startswith(
        "error: the arguments of write_file were longer than 1000000 characters"
    )
    stored_call = second["messages"][2]["tool_calls"][0]
    assert stored_call["function"]["arguments"] == "{}"  # the conversation stays small
    assert not (workdir / "big.txt").exists()
