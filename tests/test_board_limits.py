"""The board holds against idle and malformed connections (issue #51): capped connections and
idle ones closed, numbers and JSON bodies bounded (a JSON 400/404, never a 500), ``initData``
from the future refused, a taken port costs the board only, and the real ``detach run`` at a
1,024 open-file limit keeps serving Telegram under 2,000 idle board connections."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import psutil
import pytest

from bot.app import App
from bot.board import make_board
from bot.board.auth import COOKIE
from bot.board.limits import Limits
from bot.board.server import Board
from bot.models import TaskStatus
from bot.tasks.audit import AuditLog
from bot.tasks.reads import TaskReads
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, app_in_own_task, process_env, stop_process
from tests.support.recording_session import RecordingSession
from tests.test_board import (
    OTHER,
    board_settings,
    bot_with_board,
    client,
    finished,
    init_data,
    signed_in,
    wait_status,
)
from tests.test_handlers import feed, message

HUGE = "1" * 25  # beyond what SQLite or PostgreSQL store
ROOT = Path(__file__).resolve().parent.parent
PIN = "3.14.5"  # the aiohttp bot/board/doors.py and the keep-alive limits were built on


# -- numbers, bodies, initData ----------------------------------------------------------------
async def test_a_25_digit_id_is_a_json_404_on_every_route_that_takes_one(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        http, csrf = await signed_in(app, board)
        routes = [
            (r.method, r.resource.canonical)
            for r in board.application().router.routes()
            if r.method in ("GET", "POST") and r.resource and "{id}" in r.resource.canonical
        ]
        api = [(m, path) for m, path in routes if path.startswith("/api/")]
        assert len(api) == 12, routes  # a new route is covered by this test at once
        async with http:
            for method, path in api:
                url = board.url + path.replace("{id}", HUGE)
                headers = {"X-CSRF-Token": csrf}
                async with http.request(method, url, json={}, headers=headers) as response:
                    assert response.status == 404, (method, path, await response.text())
                    assert await response.json() == {"error": "not_found"}


async def test_a_25_digit_cursor_limit_or_question_is_a_json_400(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        await feed(app, message("/claude build it"))
        await wait_status(app, 1, TaskStatus.DONE)
        http, csrf = await signed_in(app, board)
        base = f"{board.url}/api/tasks/1"
        async with http:
            for path, field in (
                ("transcript", "cursor"),
                ("transcript", "limit"),
                ("stream", "cursor"),
            ):
                for value in (HUGE, "-1", "x"):
                    async with http.get(f"{base}/{path}?{field}={value}") as response:
                        assert response.status == 400, (path, field, value)
                        assert await response.json() == {"error": "malformed", "field": field}
            bodies = [
                {"qid": int(HUGE), "answer": "allow"},
                {"qid": HUGE, "answer": "allow"},
                {"qid": 1, "option": int(HUGE)},
                {"qid": True, "answer": "allow"},
            ]
            for body in bodies:
                post = http.post(f"{base}/answer", json=body, headers={"X-CSRF-Token": csrf})
                async with post as response:
                    assert response.status == 400, body
                    assert (await response.json())["error"] == "malformed"
            async with http.get(f"{base}/transcript?cursor=0&limit=5") as response:
                assert response.status == 200  # in range, as before


async def test_a_100000_deep_json_body_is_a_400_and_one_over_the_size_cap_a_413(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        await feed(app, message("/claude build it"))
        await wait_status(app, 1, TaskStatus.DONE)
        http, csrf = await signed_in(app, board)
        url = f"{board.url}/api/tasks/1/followup"
        headers = {"X-CSRF-Token": csrf, "Content-Type": "application/json"}
        deep = "[" * 100_000 + "]" * 100_000
        just_over = '{"prompt": "x", "a": ' + "[" * 32 + "]" * 32 + "}"
        async with http:
            for body in (deep, "[" * 100_000, '{"a":' * 40_000, just_over, "{not json"):
                async with http.post(url, data=body, headers=headers) as response:
                    assert response.status == 400, body[:40]
                    assert await response.json() == {"error": "malformed", "field": "body"}
            nested = '{"prompt": "go on", "a": ' + "[" * 31 + '"]]]"' + "]" * 31 + "}"
            async with http.post(url, data=nested, headers=headers) as response:
                assert response.status == 200, await response.text()  # 32 levels: taken
            big = '{"prompt": "' + "x" * 300_000 + '"}'
            async with http.post(url, data=big, headers=headers) as response:
                assert response.status == 413
                assert (await response.json())["error"] == "Request Entity Too Large"


async def test_init_data_from_a_year_ahead_is_refused_like_a_stale_one(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        now = int(time.time())
        async with client() as http:
            for auth_date in (now + 365 * 86400, now + 120, 10**12, now - 3700):
                form = {"initData": init_data(OWNER, auth_date)}
                async with http.post(f"{board.url}/auth/webapp", data=form) as response:
                    assert response.status == 403, auth_date
                    assert await response.json() == {"error": "refused"}
            form = {"initData": init_data(OWNER, now + 30)}  # a clock a little ahead of ours
            async with http.post(f"{board.url}/auth/webapp", data=form) as response:
                assert response.status == 200


# -- connections -------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def board_beside(app: App, limits: Limits) -> AsyncIterator[Board]:
    """A second board of the running bot, serving under ``limits``."""
    board = make_board(
        app.settings,
        reads=TaskReads(app.store),
        audit=AuditLog(app.store, app.core.texts),
        texts=app.core.texts,
        worktrees=app.core.worktrees,
        uses=app.uses,
        answers=app.dispatcher["answers"],
        limits=limits,
    )
    assert board is not None
    async with board.serve():
        yield board


async def session_token(board: Board, user: int = OWNER) -> str:
    async with client() as http:
        async with http.get(board.link(user), allow_redirects=False) as response:
            assert response.status == 303
            return response.cookies[COOKIE].value


async def raw_get(
    stream: tuple[asyncio.StreamReader, asyncio.StreamWriter], path: str, token: str = ""
) -> int:
    """One keep-alive GET on an open connection; its status (the body read and dropped)."""
    reader, writer = stream
    cookie = f"Cookie: {COOKIE}={token}\r\n" if token else ""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: board\r\n{cookie}\r\n".encode())
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    await asyncio.wait_for(reader.readexactly(length), 5)
    return int(head.split()[1])


async def status(request: contextlib.AbstractAsyncContextManager[aiohttp.ClientResponse]) -> int:
    async with request as response:
        return response.status


def served(port: int) -> int:
    """Open connections this process's board side holds on ``port``."""
    return sum(
        1
        for c in psutil.Process().net_connections("tcp")
        if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


async def closed_by_server(reader: asyncio.StreamReader, timeout_s: float) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), timeout_s) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def test_an_unsigned_flood_is_capped_and_closed_while_a_signed_in_page_answers(
    tmp_path, workdir, caplog
):
    limits = Limits(connections=24, unsigned=4, unsigned_s=1.0, keepalive_s=30)
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, _board):
        async with board_beside(app, limits) as board:
            port, token = board.bound_port, await session_token(board)
            assert port is not None
            signed = await asyncio.open_connection("127.0.0.1", port)
            assert await raw_get(signed, "/api/tasks", token) == 200
            public = await asyncio.open_connection("127.0.0.1", port)
            assert await raw_get(public, "/static/board.css") == 200  # served, never signed in
            caplog.clear()
            flood = [await asyncio.open_connection("127.0.0.1", port) for _ in range(60)]
            for _reader, writer in flood[::2]:  # half of them a header that never ends
                writer.write(b"GET / HTTP/1.1\r\nHost: board\r\nX-Slow: ")
            await asyncio.sleep(0.2)
            assert served(port) <= 1 + limits.unsigned  # the signed one and the newest four
            async with client() as http:  # a new connection gets in despite the flood
                headers = {"Cookie": f"{COOKIE}={token}"}
                async with http.get(f"{board.url}/api/tasks", headers=headers) as response:
                    assert response.status == 200
            assert await closed_by_server(public[0], limits.unsigned_s + 2)
            assert all([await closed_by_server(r, 2) for r, _w in flood])
            assert await raw_get(signed, "/api/me", token) == 200  # still open past 1 s
            for _reader, writer in (signed, public, *flood):
                writer.close()
    said = [r for r in caplog.records if "turned away" in r.getMessage()]
    assert len(said) == 1, [r.getMessage() for r in said]  # one line for the whole burst


async def test_a_users_event_streams_are_capped_and_a_closed_one_frees_its_place_at_once(
    tmp_path, workdir
):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, _board):
        async with board_beside(app, Limits(streams_per_user=2)) as board:
            owner = {"Cookie": f"{COOKIE}={await session_token(board)}"}
            other = {"Cookie": f"{COOKIE}={await session_token(board, OTHER)}"}
            url = f"{board.url}/api/stream"
            async with client() as http, contextlib.AsyncExitStack() as held:
                first = await held.enter_async_context(http.get(url, headers=owner))
                second = await held.enter_async_context(http.get(url, headers=owner))
                assert first.status == second.status == 200
                for stream in (first, second):  # each handler then waits for news
                    assert await asyncio.wait_for(stream.content.readline(), 5) == b"event: tasks\n"
                async with http.get(url, headers=owner) as response:
                    assert response.status == 429
                    assert await response.json() == {"error": "too_many_streams"}
                assert await status(http.get(url, headers=other)) == 200  # a cap of their own
                first.close()  # a page closed: its handler notices at its next write only
                async with asyncio.timeout(2):
                    while await status(http.get(url, headers=owner)) == 429:
                        await asyncio.sleep(0.05)


def test_the_caps_leave_three_quarters_of_the_open_file_limit_to_the_rest_of_the_bot():
    assert Limits.for_open_files(1024) == Limits(connections=256, unsigned=64)
    assert Limits.for_open_files(256) == Limits(connections=64, unsigned=16)
    assert Limits.for_open_files(resource.RLIM_INFINITY).connections == 256


def test_aiohttp_is_the_version_the_board_doors_were_built_on():
    """bot/board/doors.py wraps aiohttp's low-level server's protocols and the board relies on
    its keep-alive timer: a move of aiohttp is a decision (re-run this file, then move the pin
    in pyproject.toml and here together)."""
    from importlib.metadata import version

    assert version("aiohttp") == PIN
    pyproject = (Path(__file__).parent.parent / "pyproject.toml").read_text()
    assert f'"aiohttp=={PIN}"' in pyproject


# -- the port taken ----------------------------------------------------------------------------
@contextlib.contextmanager
def port_taken() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


async def test_a_taken_port_costs_the_board_only_in_one_log_line(tmp_path, workdir, caplog):
    caplog.set_level(logging.INFO)
    with port_taken() as port:
        settings = board_settings(tmp_path, workdir, board_port=port)
        engine = FakeEngine(finished("ok"))
        session = RecordingSession()
        async with app_in_own_task(settings, session=session, executors={"claude": engine}) as app:
            board = app.dispatcher["board"]
            assert isinstance(board, Board) and not board.listening and not board.mini_app
            assert "not available" in (await feed(app, message("/board"))).new_texts()
            ru = (await feed(app, message("/board", user=OTHER, language="ru"))).new_texts()
            assert "Доска сейчас недоступна" in ru
            await feed(app, message("/claude build it"))
            await wait_status(app, 1, TaskStatus.DONE)
            assert "#1 build-it" in (await feed(app, message("/tasks"))).new_texts()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("bot.board")]
    line = f"the board cannot listen on 127.0.0.1:{port}: address already in use"
    assert said == [f"{line}; Telegram runs without it"], said
    assert not [r for r in caplog.records if r.exc_info], "no traceback"


# -- the real process at the open-file limit ---------------------------------------------------
def open_idle(port: int, count: int) -> list[socket.socket]:
    """``count`` connections to ``port`` that never send a byte (connects left in flight)."""
    opened = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        code = sock.connect_ex(("127.0.0.1", port))
        assert code in (0, errno.EINPROGRESS), code
        opened.append(sock)
    return opened


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def tasks_answer(fake: FakeTelegram, chat: int) -> float:
    """Seconds from a /tasks in ``chat`` to the bot's answer."""
    mark, began = len(fake.calls), time.monotonic()
    await fake.user_message("/tasks", chat)
    await fake.wait_text(chat, "No tasks", timeout_s=10, after=mark)
    return time.monotonic() - began


def at_1024_open_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))


async def test_detach_run_at_1024_open_files_serves_telegram_under_2000_idle_board_connections(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-FD", [{"text": "done under the flood"}])
    port = free_port()
    detach = Path(sys.executable).parent / "detach"
    log_path = tmp_path / "bot.log"
    async with FakeTelegram() as fake:
        env = process_env(agent_env, fake, tmp_path / "data", claude_bin, workdir)
        env |= {"DETACH_BOARD_PORT": str(port), "DETACH_ALLOWED_USERS": f"{OWNER},{OTHER}"}
        env["PYTHONPATH"] = str(ROOT)  # this checkout's bot, whichever one the venv installed
        with log_path.open("ab") as log:
            bot = await asyncio.create_subprocess_exec(
                str(detach), "run", cwd=tmp_path, env=env, stdout=log, stderr=log,
                preexec_fn=at_1024_open_files,
            )  # fmt: skip
        idle: list[socket.socket] = []
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            assert psutil.Process(bot.pid).rlimit(psutil.RLIMIT_NOFILE) == (1024, 1024)
            async with asyncio.timeout(30):  # settled: its start-up work is off the loop
                while "first Telegram types built" not in log_path.read_text():
                    await asyncio.sleep(0.05)
            await tasks_answer(fake, OTHER)  # the first one of a chat reads more
            before = log_path.stat().st_size
            idle = open_idle(port, 2000)
            for wait_s in (0.0, 0.0, 1.0, 1.0):
                await asyncio.sleep(wait_s)
                assert await tasks_answer(fake, OTHER) < 1.0
            await fake.user_message("/claude MARK-FD say it", OWNER)
            await fake.wait_text(OWNER, "done under the flood", timeout_s=60)
            assert psutil.Process(bot.pid).num_fds() < 512
            grew = log_path.stat().st_size - before
            assert grew < 4096, log_path.read_text()[before:][-3000:]
        finally:
            for sock in idle:
                sock.close()
            await stop_process(bot)
    text = log_path.read_text()
    assert text.count("turned away") == 1
    assert "Traceback" not in text and "unable to open database file" not in text


@pytest.fixture(autouse=True)
def _enough_files_for_the_flood() -> None:
    """This process holds the attacker's sockets too."""
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= 4096
