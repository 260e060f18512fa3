"""Every door of one running bot, driven from outside: the chat through the fake Bot API (text,
a document with a caption, a voice note turned draft), the board over HTTP with its sign-in
link's cookie and CSRF token, the Mini App with Telegram-signed ``initData`` and a bearer token,
`detach add` and `detach mcp` as processes of their own, a task file written into the inbox and
an ``/at`` schedule. Nothing here reaches into the bot's objects: what a door shows is read from
the fake Bot API, the board's JSON and what a process printed, so the doors' tests hold while
the code behind them is rearranged (tests/test_every_door.py)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

import aiohttp
from mcp import Client, StdioServerParameters

from tests.support.anthropic_mock import AnthropicMock
from tests.support.fake_forum import FakeForum
from tests.support.fake_telegram import Call
from tests.support.harness import OWNER
from tests.support.managed_mock import ManagedMock
from tests.support.stt_server import Answer, SttServer

ROOT = Path(__file__).resolve().parent.parent.parent
LINK = re.compile(r"(http://[^\s<\"/]+)(/signin\?t=[\w.=-]+)")
TASK_FILE = "---\nchat_id: {chat}\n{options}---\n\n# Goal\n\n{goal}\n"
WAIT_S = 60.0  # the longest any one thing the owner waits for may take on a loaded machine


def buttons(call: Call | dict[str, Any]) -> dict[str, str]:
    """A message's buttons, text to callback data (a call to the Bot API, or a message)."""
    params = call.params if isinstance(call, Call) else call
    markup = params.get("reply_markup") or {}
    return {b["text"]: b["callback_data"] for row in markup.get("inline_keyboard", []) for b in row}


async def until(check: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    async with asyncio.timeout(timeout_s):
        while not check():
            await asyncio.sleep(0.05)


@dataclass
class Board:
    """One signed-in board client: the browser's (cookie) or the Mini App's (bearer)."""

    http: aiohttp.ClientSession
    url: str
    headers: dict[str, str]

    async def get(self, path: str) -> Any:
        async with self.http.get(f"{self.url}{path}", headers=self.headers) as response:
            assert response.status == 200, (path, response.status, await response.text())
            return await response.json()

    async def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        async with self.http.post(
            f"{self.url}{path}", json=body or {}, headers=self.headers
        ) as response:
            assert response.status == 200, (path, response.status, await response.text())
            return await response.json()

    async def row(self, needle: str) -> dict[str, Any]:
        """The board's list row whose title holds ``needle`` (a held task's included)."""
        rows = (await self.get("/api/tasks"))["tasks"]
        found = [r for r in rows if needle in r["title"]]
        assert len(found) == 1, (needle, [r["title"] for r in rows])
        return found[0]


def init_data(user: int, token: str) -> str:
    """``initData`` as Telegram signs it for the Mini App of the bot with ``token``."""
    from tests.test_board import init_data as signed

    return signed(user, int(time.time()), token)


@dataclass
class Bench:
    """One running bot and a hand on each of its doors."""

    fake: FakeForum  # topics on in the private chat: a task's messages are in its topic
    anthropic: AnthropicMock
    stt: SttServer
    data_dir: Path
    workdir: Path
    env: dict[str, str]  # what `detach add` and `detach mcp` run with
    token: str
    project: Path | None = None  # the bot's project ``site`` (DETACH_PROJECTS)
    remote: ManagedMock | None = None  # the Managed Agents API the bot's managed tasks use
    database_url: str = ""
    board: Board | None = None
    mini_app: Board | None = None
    mcp: Client | None = None
    said: dict[str, str] = field(default_factory=dict)  # what a process door answered, by door
    voice: asyncio.Lock = field(default_factory=asyncio.Lock)  # the STT answers in order

    @property
    def inbox(self) -> Path:
        return self.data_dir / "inbox"

    async def shown(self, command: str, needle: str) -> Call:
        """What the bot answers ``command`` with, once it says ``needle``."""
        mark = len(self.fake.calls)
        await self.fake.user_message(command, OWNER)
        return await self.fake.wait_text(OWNER, needle, WAIT_S, after=mark)

    async def press(self, call: Call, text: str) -> str:
        """The owner taps the button ``text`` of the message ``call`` sent; Telegram's toast."""
        message_id = call.result["message_id"]
        data = buttons(self.fake.find_message(OWNER, message_id))[text]
        query = await self.fake.press(OWNER, message_id, data, OWNER)
        answered = await self.fake.wait_call(
            "answerCallbackQuery", lambda c: c.params["callback_query_id"] == query, WAIT_S
        )
        return str(answered.params.get("text", ""))

    def buttons_now(self, call: Call) -> list[str]:
        return list(buttons(self.fake.find_message(OWNER, call.result["message_id"])))

    def text_now(self, call: Call) -> str:
        return str(self.fake.find_message(OWNER, call.result["message_id"])["text"])

    async def tool(self, name: str, **arguments: Any) -> tuple[bool, str]:
        """An MCP tool called through `detach mcp`: (is it an error, its text)."""
        assert self.mcp is not None
        result = await self.mcp.call_tool(name, arguments)
        return bool(result.is_error), str(result.content[0].text)


# -- the doors a task is started by ------------------------------------------------------------

Options = Mapping[str, str]  # a task's options (``cwd``...), given as each door takes them
NONE: Options = MappingProxyType({})


def typed(options: Options) -> str:
    """``options`` as a task command types them, before its goal."""
    return "".join(f"{key}={value} " for key, value in options.items())


async def by_chat(bench: Bench, goal: str, options: Options = NONE) -> None:
    await bench.fake.user_message(f"/detach {typed(options)}{goal}", OWNER)


async def by_chat_file(bench: Bench, goal: str, options: Options = NONE) -> None:
    caption = f"/detach {typed(options)}{goal}"
    await bench.fake.user_document(b"notes\n", "notes.txt", OWNER, caption=caption)


async def by_voice(bench: Bench, goal: str, options: Options = NONE) -> None:
    """A voice note: its transcript is shown as a draft, and the owner's Start begins it. Its
    words are all goal: it takes no options."""
    assert not options, "a voice note takes no options"
    async with bench.voice:  # the transcription server answers in order: one note at a time
        bench.stt.answers.append(Answer(text=goal))
        mark = len(bench.fake.calls)
        await bench.fake.user_voice(b"OggS-note", OWNER, duration_s=3)
        draft = await bench.fake.wait_text(OWNER, f"🎤 {goal}", WAIT_S, after=mark)
    await bench.press(draft, "▶️ Start")


async def by_detach_add(bench: Bench, goal: str, options: Options = NONE) -> None:
    """`detach add` as its own process; what it printed is kept in ``bench.said``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot", "add", *typed(options).split(), *goal.split(),
        cwd=bench.workdir, env=bench.env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), WAIT_S)
    bench.said["detach_add"] = f"exit {proc.returncode}\n{out.decode()}{err.decode()}"


async def by_mcp(bench: Bench, goal: str, options: Options = NONE) -> None:
    error, text = await bench.tool("start", goal=goal, **options)
    bench.said["mcp"] = f"{'error' if error else 'ok'}\n{text}"


async def by_task_file(bench: Bench, goal: str, options: Options = NONE) -> None:
    name = re.sub(r"\W+", "-", goal.split()[0].lower()).strip("-")
    lines = "".join(f"{key}: {value}\n" for key, value in options.items())
    (bench.inbox / f"{name}.md").write_text(TASK_FILE.format(chat=OWNER, options=lines, goal=goal))


async def by_schedule(bench: Bench, goal: str, options: Options = NONE) -> None:
    await bench.fake.user_message(f"/at +1s {typed(options)}{goal}", OWNER)


class Start(Protocol):
    def __call__(self, bench: Bench, goal: str, options: Options = ...) -> Awaitable[None]: ...


STARTS: dict[str, Start] = {
    "chat": by_chat,
    "chat_file": by_chat_file,
    "voice": by_voice,
    "detach_add": by_detach_add,
    "mcp": by_mcp,
    "task_file": by_task_file,
    "schedule": by_schedule,
}


# -- the bench ---------------------------------------------------------------------------------


def process_env(data_dir: Path, workdir: Path, home: Path) -> dict[str, str]:
    """`detach add` / `detach mcp`'s environment: the bot's settings, nothing of the real home."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PYTHONPATH": str(ROOT),
        "DETACH_DATA_DIR": str(data_dir),
        "DETACH_ALLOWED_USERS": str(OWNER),
        "DETACH_ALLOWED_WORKDIRS": str(workdir),
        "DETACH_WORKDIR": str(workdir),
        "DETACH_PREFLIGHT": "on",
    }


@asynccontextmanager
async def signed_in(bench: Bench) -> AsyncIterator[None]:
    """The board signed in through /board's one-time link, the Mini App through ``initData``;
    `detach mcp` connected: each on ``bench``."""
    async with AsyncExitStack() as stack:
        said = await bench.shown("/board", "/signin?t=")
        link = LINK.search(json.dumps(said.params))
        assert link is not None, said.params
        url = link.group(1)
        jar = aiohttp.CookieJar(unsafe=True)  # the board is at 127.0.0.1
        timeout = aiohttp.ClientTimeout(total=WAIT_S)
        browser = await stack.enter_async_context(
            aiohttp.ClientSession(cookie_jar=jar, timeout=timeout, connector=_connector())
        )
        async with browser.get(url + link.group(2), allow_redirects=False) as response:
            assert response.status == 303, response.status
        async with browser.get(f"{url}/api/me") as response:
            csrf = (await response.json())["csrf"]
        bench.board = Board(browser, url, {"X-CSRF-Token": csrf})
        phone = await stack.enter_async_context(
            aiohttp.ClientSession(timeout=timeout, connector=_connector())
        )
        async with phone.post(
            f"{url}/auth/webapp", data={"initData": init_data(OWNER, bench.token)}
        ) as response:
            assert response.status == 200, await response.text()
            signed = await response.json()
        bench.mini_app = Board(
            phone,
            url,
            {"Authorization": f"Bearer {signed['token']}", "X-CSRF-Token": signed["csrf"]},
        )
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "bot", "mcp"], env=bench.env, cwd=bench.workdir
        )
        bench.mcp = await stack.enter_async_context(Client(server))
        yield


def _connector() -> aiohttp.TCPConnector:
    """A client that reuses a connection only while the board keeps it (its ``keepalive_s``,
    5 s): one reused as the board closed it was reset under load (a browser retries then)."""
    return aiohttp.TCPConnector(keepalive_timeout=1.0)
