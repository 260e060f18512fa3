"""The board's HTTP server (aiohttp): its lifetime (``serve``), its address and sign-in links,
and its route table: the page shell and its assets, the sign-in routes (``bot.board.gate``,
which also guards every other request), and the JSON, streams and actions
(``bot.board.api``). Connections come in through ``bot.board.doors`` within ``Limits``; a board
that cannot listen says so in one log line and the bot goes on without it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from bot.board.actions import BoardActions
from bot.board.api import BoardApi
from bot.board.auth import BoardAuth
from bot.board.doors import Doors
from bot.board.events import Pulse, Streams
from bot.board.gate import Gate, secure_headers
from bot.board.limits import Limits, StreamQuota
from bot.board.views import BoardData

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"


class Board:
    """The board of one bot; ``serve`` runs it, ``link`` makes a sign-in link."""

    def __init__(
        self,
        *,
        auth: BoardAuth,
        data: BoardData,
        actions: BoardActions,
        host: str,
        port: int,
        public_url: str | None = None,
        limits: Limits | None = None,
    ) -> None:
        """``limits``: by default, ``Limits.for_open_files()``."""
        self.auth = auth
        self._host = host
        self._port = port
        self._public_url = public_url.rstrip("/") if public_url else None
        self._closing = asyncio.Event()
        self._pulse = Pulse(data.reads, self._closing)
        self.bound_port: int | None = None  # None: not listening
        self._limits = limits or Limits.for_open_files()
        self._doors = Doors(self._limits)
        shell_html = (STATIC / "index.html").read_text()  # once, at start
        self._gate = Gate(auth, data, shell_html, lambda: self.url, self._doors.signed_in)
        quota = StreamQuota(self._limits.streams_per_user)
        streams = Streams(data, self._pulse, self._closing, quota)
        self._api = BoardApi(data, actions, streams, self._limits.json_depth)

    @property
    def listening(self) -> bool:
        return self.bound_port is not None

    @property
    def url(self) -> str:
        """Where a browser reaches the board: DETACH_PUBLIC_URL, else the bound address."""
        if self._public_url:
            return self._public_url
        host = "127.0.0.1" if self._host in ("0.0.0.0", "") else self._host
        return f"http://{host}:{self.bound_port or self._port}"

    @property
    def mini_app(self) -> bool:
        """Telegram opens only https:// addresses as a Mini App (and a board not listening
        opens none)."""
        return bool(self.listening and self._public_url and self._public_url.startswith("https://"))

    def link(self, user_id: int) -> str:
        """A one-time sign-in link for ``user_id``."""
        return f"{self.url}/signin?t={self.auth.link_token(user_id)}"

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[Board]:
        """Listening while inside, unless it cannot bind (then ``listening`` is False); every
        stream ends and the port is closed on exit."""
        runner = web.AppRunner(
            self.application(),
            access_log=None,
            shutdown_timeout=2,
            keepalive_timeout=self._limits.keepalive_s,
        )
        await runner.setup()
        try:
            listener = await self._doors.listen(_factory(runner), self._host, self._port)
        except OSError as exc:
            where, why = f"{self._host}:{self._port}", _reason(exc)
            log.error("the board cannot listen on %s: %s; Telegram runs without it", where, why)
            await runner.cleanup()
            yield self
            return
        self.bound_port = int(listener.sockets[0].getsockname()[1])  # what port 0 chose
        pulse = asyncio.create_task(self._pulse.run(), name="board pulse")
        log.info("board at %s", self.url)
        try:
            yield self
        finally:
            self._closing.set()
            listener.close()
            await runner.cleanup()
            self._doors.shut()  # the idle ones aiohttp never saw
            await asyncio.wait_for(pulse, 5)

    def application(self) -> web.Application:
        gate, api = self._gate, self._api
        app = web.Application(middlewares=[gate.signed_in], client_max_size=256 * 1024)
        app.on_response_prepare.append(secure_headers)
        get, post = app.router.add_get, app.router.add_post
        get("/", gate.shell)
        get("/tasks/{id:\\d+}", gate.shell)
        get("/signin", gate.signin)
        post("/auth/webapp", gate.webapp)
        post("/signout", gate.signout)
        get("/api/me", api.me)
        get("/api/tasks", api.tasks)
        get("/api/hosts", api.hosts)
        get("/api/stream", api.tasks_stream)
        get("/api/tasks/{id:\\d+}", api.task)
        get("/api/tasks/{id:\\d+}/transcript", api.transcript)
        get("/api/tasks/{id:\\d+}/diff", api.diff)
        get("/api/tasks/{id:\\d+}/stream", api.task_stream)
        post("/api/tasks/{id:\\d+}/answer", api.answer)
        post("/api/tasks/{id:\\d+}/followup", api.followup)
        post("/api/tasks/{id:\\d+}/cancel", api.cancel)
        post("/api/tasks/{id:\\d+}/merge", api.merge)
        post("/api/tasks/{id:\\d+}/discard", api.discard)
        post("/api/tasks/{id:\\d+}/push", api.push)
        post("/api/tasks/{id:\\d+}/open_pr", api.open_pr)
        post("/api/holds/{id:\\d+}", api.hold)
        app.router.add_static("/static/", STATIC, append_version=False)
        return app


def _factory(runner: web.AppRunner) -> web.Server:
    """aiohttp's low-level server: the protocol factory behind every admitted connection."""
    if runner.server is None:
        raise RuntimeError("the board's runner was not set up")
    return runner.server


def _reason(exc: OSError) -> str:
    """Why a bind failed, in a few words ("address already in use")."""
    if exc.errno is not None and exc.errno > 0:
        return os.strerror(exc.errno).lower()
    return str(exc.strerror or exc).lower()
