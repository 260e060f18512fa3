"""Every walk-away door alike, end to end: the real bot against the fake Bot API, the real claude
CLI for the preflight and the agent against the scripted model, the board over HTTP. Whichever
door a task comes by (a chat command, a command with a file, a task file in the inbox, an /at
schedule firing, `detach add` as its own process, an MCP client's start), a refusal holds it: its
message has Start anyway and Drop, it waits in /pending, /tasks and on the board, and nothing
runs until Start anyway (pressed on the board here: the chat's message loses its buttons too).
An estimate above what the day's cap leaves asks the same way, and Drop starts nothing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from mcp import Client

from bot.app import App
from bot.board.server import Board
from bot.mcp.desk import McpDesk, McpPlace
from bot.mcp.server import build_server
from bot.preflight.message import ANYWAY
from tests.conftest import ROOT
from tests.support.chat_mock import ChatMock
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_approvals_e2e import answer_of, buttons
from tests.test_check_consent import MACHINE
from tests.test_checks import finished
from tests.test_mcp import client_tasks
from tests.test_phone import buttons_of, until

PREFLIGHT = "You are the preflight of an unattended coding agent"
REASON = "It would delete every backup."
CHOICES = ["▶️ Start anyway", "🗑 Drop"]
LINK = re.compile(r"(http://[^\s<]+/signin\?t=[\w.=-]+)")
TASK_FILE = "---\nchat_id: {chat}\n---\n\n# Goal\n\n{goal}\n"


@dataclass
class Bench:
    """One running bot and what its doors need."""

    fake: FakeTelegram
    app: App
    tmp_path: Path
    workdir: Path
    said: list[str]  # what a door answered its caller (`detach add`, an MCP client)

    @property
    def inbox(self) -> Path:
        return self.tmp_path / "data" / "inbox"


async def by_chat(bench: Bench, goal: str) -> None:
    await bench.fake.user_message(f"/detach {goal}", OWNER)


async def by_chat_file(bench: Bench, goal: str) -> None:
    await bench.fake.user_document(
        b"backup list\n", "backups.txt", OWNER, caption=f"/detach {goal}"
    )


async def by_task_file(bench: Bench, goal: str) -> None:
    (bench.inbox / "wipe.md").write_text(TASK_FILE.format(chat=OWNER, goal=goal))


async def by_schedule(bench: Bench, goal: str) -> None:
    await bench.fake.user_message(f"/at +1s {goal}", OWNER)


async def by_detach_add(bench: Bench, goal: str) -> None:
    """`detach add` as its own process (``mode=ask`` once wrote the task past the preflight)."""
    home = bench.tmp_path / "home"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PYTHONPATH": str(ROOT),
        "DETACH_DATA_DIR": str(bench.tmp_path / "data"),
        "DETACH_ALLOWED_USERS": str(OWNER),
        "DETACH_ALLOWED_WORKDIRS": str(bench.workdir),
        "DETACH_WORKDIR": str(bench.workdir),
        "DETACH_PREFLIGHT": "on",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "add", "mode=ask", *goal.split(),
        cwd=bench.workdir, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    # the running bot took the file and held it: no number to print, the reason instead
    assert proc.returncode == 1 and "not started: held by the bot's preflight" in err.decode()
    bench.said.append(err.decode())


async def by_mcp(bench: Bench, goal: str) -> None:
    data = bench.tmp_path / "data"
    place = McpPlace(data, OWNER, OWNER, ("claude",), 1000, data / "bot.alive")
    async with Client(build_server(McpDesk(client_tasks(bench.app.store, place), place))) as client:
        started = await client.call_tool("start", {"goal": goal})
    assert started.is_error, started  # no task to name: the caller is told why
    bench.said.append(started.content[0].text)


Door = Callable[[Bench, str], Awaitable[None]]
DOORS: dict[str, Door] = {
    "chat": by_chat,
    "chat_file": by_chat_file,
    "task_file": by_task_file,
    "schedule": by_schedule,
    "detach_add": by_detach_add,
    "mcp": by_mcp,
}


def preflight_settings(tmp_path: Path, chat: ChatMock) -> dict[str, Any]:
    config = tmp_path / "detach.toml"
    config.write_text(
        f'[presets.judge]\nengine = "local"\nmodel = "m"\nbase_url = "{chat.base_url}"\n'
    )
    return {"config": config, "preflight": True, "preflight_model": "judge"}


@asynccontextmanager
async def bench_for(
    tmp_path: Path, claude_bin: str, agent_env: dict[str, str], workdir: Path, **more: Any
) -> AsyncIterator[Bench]:
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, preflight=True, board_port=0, **more
        )
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            yield Bench(fake, app, tmp_path, workdir, [])


def agent_ran(anthropic: Any, marker: str) -> bool:
    asked = anthropic.requests_for(marker)
    return any(PREFLIGHT not in r["first_user_text"] for r in asked)


async def shown(fake: FakeTelegram, command: str, waits_for: str) -> Any:
    mark = len(fake.calls)
    await fake.user_message(command, OWNER)
    return await fake.wait_text(OWNER, waits_for, after=mark, timeout_s=20)


@asynccontextmanager
async def board_client(bench: Bench) -> AsyncIterator[tuple[aiohttp.ClientSession, str, str]]:
    """A browser signed in to the board with /board's link: its session, CSRF token, address."""
    board = bench.app.dispatcher["board"]
    assert isinstance(board, Board)
    said = await shown(bench.fake, "/board", "/signin?t=")
    link = LINK.search(said.params["text"])
    assert link is not None, said.params["text"]
    jar = aiohttp.CookieJar(unsafe=True)  # the board is at 127.0.0.1
    async with aiohttp.ClientSession(
        cookie_jar=jar, timeout=aiohttp.ClientTimeout(total=20)
    ) as http:
        async with http.get(link.group(1), allow_redirects=False) as response:
            assert response.status == 303
        async with http.get(f"{board.url}/api/me") as response:
            csrf = (await response.json())["csrf"]
        yield http, csrf, board.url


@pytest.mark.parametrize("door", list(DOORS))
async def test_a_refusal_holds_the_task_whichever_door_it_came_by(
    door, tmp_path, claude_bin, agent_env, anthropic, workdir
):
    marker = f"MARK-{door.upper().replace('_', '')}"
    goal = f"{marker} wipe the build cache and every backup"
    anthropic.script(PREFLIGHT, [{"text": json.dumps({"verdict": "refuse", "reason": REASON})}])
    anthropic.script(marker, [{"text": f"{marker} ran anyway."}])
    async with bench_for(tmp_path, claude_bin, agent_env, workdir) as bench:
        fake, app = bench.fake, bench.app
        await DOORS[door](bench, goal)
        refusal = await fake.wait_text(OWNER, f"Not started: {REASON}", timeout_s=30)
        text = refusal.params["text"]
        assert text.startswith("⏸ held by its preflight") and marker in text, text
        assert list(buttons(refusal)) == CHOICES
        assert await app.store.tasks.list_for(None) == []  # held: no task, nothing ran
        assert not agent_ran(anthropic, marker)

        copy = await shown(fake, "/pending", f"Not started: {REASON}")
        assert buttons(copy) == buttons(refusal)  # the same desk answers it
        listed = (await shown(fake, "/tasks", "Your tasks")).params["text"]
        assert f"⏸ <i>{goal}" in listed and "held by its preflight · /pending" in listed
        async with board_client(bench) as (http, csrf, url):
            async with http.get(f"{url}/api/tasks") as response:
                [row] = (await response.json())["tasks"]
            assert row["wait_text"] == "held by its preflight" and row["title"].startswith(goal)
            assert [c["text"] for c in row["choices"]] == CHOICES
            assert row["text"] == refusal.params["text"]  # the chat's message, word for word
            anyway = next(c["choice"] for c in row["choices"] if c["text"] == CHOICES[0])
            async with http.post(
                f"{url}/api/holds/{row['hold']}",
                json={"choice": anyway},
                headers={"X-CSRF-Token": csrf},
            ) as response:
                assert (await response.json())["text"] == "Starting"
        ack = await fake.wait_text(OWNER, "Started anyway, against the preflight.", timeout_s=20)
        assert marker.lower() in ack.params["text"]
        await until(lambda: buttons_of(fake, refusal.result["message_id"]) == [])  # answered
        await fake.wait_text(OWNER, f"{marker} ran anyway.", timeout_s=90)
        [task] = await app.store.tasks.list_for(None)
        assert task.title.startswith(marker)
        if door == "chat_file":  # the file waited with the hold, then went to the task
            assert list(Path(task.cwd).glob(".detach/attachments/*backups.txt"))
    said = "\n".join(bench.said)
    if door in ("mcp", "detach_add"):
        assert "held by the bot's preflight" in said and REASON in said, said
    if door == "task_file":
        [held] = (bench.inbox / "held").glob("h1-wipe.md")
        assert REASON in held.with_name(held.name + ".reason.txt").read_text()


@pytest.mark.parametrize("door", list(DOORS))
async def test_an_estimate_over_the_days_cap_asks_first_whichever_door(
    door, tmp_path, claude_bin, agent_env, anthropic, workdir
):
    marker = f"MARK-DEAR{door.upper().replace('_', '')}"
    go = {"verdict": "go", "estimate_usd": 3.0, "estimate_minutes": 20}
    anthropic.script(PREFLIGHT, [{"text": json.dumps(go)}])
    async with bench_for(tmp_path, claude_bin, agent_env, workdir, daily_cap_usd=1.0) as bench:
        fake, app = bench.fake, bench.app
        await DOORS[door](bench, f"{marker} rewrite the parser")
        asked = await fake.wait_text(OWNER, "estimates this task at about $3.00", timeout_s=30)
        assert "more than the $1.00 it has left" in asked.params["text"]
        assert list(buttons(asked)) == CHOICES
        query = await fake.press(
            OWNER, asked.result["message_id"], buttons(asked)[CHOICES[1]], OWNER
        )
        assert await answer_of(fake, query) == "Dropped: not started"
        await shown(fake, "/pending", "Nothing asks for your answer")
        assert await app.store.tasks.list_for(None) == []
        assert not agent_ran(anthropic, marker)


@pytest.mark.parametrize("door", ["task_file", "schedule", "mcp"])
async def test_a_question_to_nobody_waits_as_in_the_chat_then_starts_on_best_judgement(
    door, tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """A door with no person at it: the question goes to the owner's chat and waits
    DETACH_PREFLIGHT_WAIT_S, as a command's does; unanswered, the task starts and its agent is
    told to use its best judgement."""
    marker = f"MARK-ASK{door.upper().replace('_', '')}"
    ask = {"verdict": "ask", "question": "Which tests?", "answers": ["unit", "all"]}
    anthropic.script(PREFLIGHT, [{"text": json.dumps(ask)}])
    anthropic.script(marker, [{"text": f"{marker} did its best."}])
    async with bench_for(tmp_path, claude_bin, agent_env, workdir, preflight_wait_s=2.0) as bench:
        await DOORS[door](bench, f"{marker} fix the tests")
        asked = await bench.fake.wait_text(OWNER, "Before this task starts: Which tests?")
        assert list(buttons(asked)) == ["unit", "all", *CHOICES]
        ack = await bench.fake.wait_text(OWNER, "got no answer", timeout_s=30)
        assert marker.lower() in ack.params["text"]
        await bench.fake.wait_text(OWNER, f"{marker} did its best.", timeout_s=90)
        [prompt] = [
            r["first_user_text"]
            for r in anthropic.requests_for(marker)
            if PREFLIGHT not in r["first_user_text"]
        ]
        assert "The owner was asked: Which tests?" in prompt
    if door == "mcp":
        assert "starts on its best judgement" in "\n".join(bench.said)


async def test_a_hold_made_before_the_upgrade_starts_from_its_command_as_typed(tmp_path, workdir):
    """A hold stored before holds kept their task (no ``task``): Start anyway plans its command
    again, its options included, as the chat did then."""
    chat = ChatMock().start()
    engine = FakeEngine(finished("done as typed"))
    try:
        async with FakeTelegram() as fake:
            settings = make_settings(
                tmp_path / "data", fake, "claude", workdir, **preflight_settings(tmp_path, chat)
            )
            async with running_bot(settings, MACHINE, {"claude": engine}) as app:
                hold = await app.store.preflights.create(
                    owner_id=OWNER, chat_id=OWNER, locale="en", reply_to=None,
                    text="max_usd=2 MARK-OLD tidy the logs", with_options=True,
                    decision="refuse", reason="old",
                )  # fmt: skip
                assert await app.uses.preflight.tap(OWNER, hold.id, ANYWAY) == "preflight.starting"
                await fake.wait_text(OWNER, "done as typed", timeout_s=20)
                task = await app.store.tasks.get(1)
                assert (task.max_usd, task.title) == (2.0, "MARK-OLD tidy the logs")
    finally:
        chat.stop()
