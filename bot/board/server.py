"""The board's HTTP server (aiohttp): the page shell and its assets, the JSON the page reads, the
event streams and the actions. Nothing but the shell's static assets answers without a session:
a page answers 401 (its body is the shell, which signs a Telegram Mini App in with its
``initData``), JSON and streams 401, a state-changing request without the session's CSRF token
403, and another user's task 404, exactly like a missing one."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.approvals.view import ApprovalChoice
from bot.board.actions import BoardActions
from bot.board.auth import COOKIE, SESSION_TTL_S, BoardAuth, Refused, Session
from bot.board.events import Pulse, Streams
from bot.board.views import BoardData
from bot.errors import TaskNotFound, UserInputError
from bot.models import Task
from bot.telegram.render import plain

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
SESSION_KEY = web.RequestKey("session", Session)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PUBLIC = ("/signin", "/auth/webapp", "/static/")
# Every response: only the board's own files run (no inline script, no eval, no plug-ins); the
# page speaks Telegram's Mini App protocol itself, so no telegram.org script is loaded at all;
# it never parses HTML (no innerHTML: Trusted Types refuse it in Chromium, should one creep in).
# Telegram's native clients open the board in a web view (no frame); Telegram Web frames it.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "require-trusted-types-for 'script'; trusted-types 'none'; "
        "frame-ancestors 'self' https://web.telegram.org"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
# the texts the page shows (locales/*/detach.po, msgids ``board.*``)
PAGE_TEXTS = (
    "title", "tasks", "archived", "show_archived", "empty", "goal", "transcript", "turns",
    "checks", "diff", "no_diff", "pending", "allow", "deny", "always", "always_confirm",
    "followup_label", "send", "cancel", "merge", "discard", "discard_confirm", "cost", "age",
    "engine", "model", "mode", "directory", "new_file", "deleted_file", "passed", "failed",
    "no_output", "turn", "live", "offline", "back", "signin_needed", "badge_approval",
    "badge_question", "badge_limit", "filter", "all", "active", "finished", "done_toast",
    "diff_checkout",
)  # fmt: skip


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
    ) -> None:
        self.auth = auth
        self._data = data
        self._actions = actions
        self._host = host
        self._port = port
        self._public_url = public_url.rstrip("/") if public_url else None
        self._closing = asyncio.Event()
        self._pulse = Pulse(data.store, self._closing)
        self._streams = Streams(data, self._pulse, self._closing)
        self.bound_port: int | None = None
        self._shell_html = (STATIC / "index.html").read_text()  # once, at start

    @property
    def url(self) -> str:
        """Where a browser reaches the board: DETACH_PUBLIC_URL, else the bound address."""
        if self._public_url:
            return self._public_url
        host = "127.0.0.1" if self._host in ("0.0.0.0", "") else self._host
        return f"http://{host}:{self.bound_port or self._port}"

    @property
    def mini_app(self) -> bool:
        """Telegram opens only https:// addresses as a Mini App."""
        return bool(self._public_url and self._public_url.startswith("https://"))

    def link(self, user_id: int) -> str:
        """A one-time sign-in link for ``user_id``."""
        return f"{self.url}/signin?t={self.auth.link_token(user_id)}"

    @contextlib.asynccontextmanager
    async def serve(self) -> AsyncIterator[Board]:
        """Listening while inside; every stream ends and the port is closed on exit."""
        runner = web.AppRunner(self.application(), access_log=None, shutdown_timeout=2)
        await runner.setup()
        site = web.TCPSite(runner, self._host, self._port)
        await site.start()
        self.bound_port = int(runner.addresses[0][1])  # what port 0 chose
        pulse = asyncio.create_task(self._pulse.run(), name="board pulse")
        log.info("board at %s", self.url)
        try:
            yield self
        finally:
            self._closing.set()
            await runner.cleanup()
            await asyncio.wait_for(pulse, 5)

    def application(self) -> web.Application:
        app = web.Application(middlewares=[self._signed_in], client_max_size=256 * 1024)
        app.on_response_prepare.append(_secure)
        get, post = app.router.add_get, app.router.add_post
        get("/", self._shell)
        get("/tasks/{id:\\d+}", self._shell)
        get("/signin", self._signin)
        post("/auth/webapp", self._webapp)
        post("/signout", self._signout)
        get("/api/me", self._me)
        get("/api/tasks", self._tasks)
        get("/api/stream", self._tasks_stream)
        get("/api/tasks/{id:\\d+}", self._task)
        get("/api/tasks/{id:\\d+}/transcript", self._transcript)
        get("/api/tasks/{id:\\d+}/diff", self._diff)
        get("/api/tasks/{id:\\d+}/stream", self._task_stream)
        post("/api/tasks/{id:\\d+}/answer", self._answer)
        post("/api/tasks/{id:\\d+}/followup", self._followup)
        post("/api/tasks/{id:\\d+}/cancel", self._cancel)
        post("/api/tasks/{id:\\d+}/merge", self._merge)
        post("/api/tasks/{id:\\d+}/discard", self._discard)
        app.router.add_static("/static/", STATIC, append_version=False)
        return app

    # -- the gate ----------------------------------------------------------------------------
    @web.middleware
    async def _signed_in(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith(PUBLIC):
            return await handler(request)
        session = self.auth.session(_token(request))
        if session is None:
            if request.path.startswith("/api/") or request.method != "GET":
                return web.json_response({"error": "signin"}, status=401)
            return await self._shell_page(request, self.auth.known(_token(request)), 401)
        if request.method == "POST":
            sent = request.headers.get("X-CSRF-Token", "")
            if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
                return web.json_response({"error": "csrf"}, status=403)
        request[SESSION_KEY] = session
        try:
            return await handler(request)
        except TaskNotFound:
            return web.json_response({"error": "not_found"}, status=404)
        except UserInputError as exc:
            locale = await self._data.locale(session.user_id)
            text = self._data.texts.get(locale, exc.key, **exc.params)
            return web.json_response({"error": exc.key, "text": plain(text)}, status=409)

    # -- pages and sign-in ---------------------------------------------------------------------
    async def _shell(self, request: web.Request) -> web.StreamResponse:
        return await self._shell_page(request, request[SESSION_KEY].user_id)

    async def _shell_page(
        self, request: web.Request, user_id: int | None, status: int = 200
    ) -> web.Response:
        """The page shell: no data of anybody's in it (the page reads the JSON), only the
        sign-in hint: in the /lang of ``user_id`` (whose session expired, or whose sign-in
        link failed) when they chose one, else in the browser's language."""
        texts = self._data.texts
        chosen = await self._data.chosen_locale(user_id) if user_id is not None else None
        wanted = request.headers.get("Accept-Language", "").split(",")[0].strip()
        locale = chosen or texts.pick(wanted or None)
        body = self._shell_html.replace("__LANG__", locale).replace(
            "__SIGNIN__", html.escape(texts.template(locale, "board.signin_needed"))
        )
        return web.Response(
            text=body,
            status=status,
            content_type="text/html",
            headers={"Cache-Control": "no-store"},
        )

    async def _signin(self, request: web.Request) -> web.StreamResponse:
        link = request.query.get("t", "")
        try:
            token, _session = self.auth.redeem(link)
        except Refused as exc:
            log.info("board sign-in refused: %s", exc)
            return await self._shell_page(request, self.auth.known(_token(request), link), 403)
        response = web.HTTPSeeOther("/")
        _set_cookie(response, token, secure=self.url.startswith("https://"))
        raise response

    async def _webapp(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        try:
            token, session = self.auth.from_init_data(str(form.get("initData", "")))
        except Refused as exc:
            log.info("board Mini App sign-in refused: %s", exc)
            return web.json_response({"error": "refused"}, status=403)
        return web.json_response({"token": token, "csrf": session.csrf})

    async def _signout(self, request: web.Request) -> web.StreamResponse:
        self.auth.close(_token(request) or "")
        response = web.json_response({"ok": True})
        response.del_cookie(COOKIE, path="/")
        return response

    # -- JSON ----------------------------------------------------------------------------------
    async def _me(self, request: web.Request) -> web.StreamResponse:
        session = request[SESSION_KEY]
        locale = await self._data.locale(session.user_id)
        texts = {k: self._data.texts.template(locale, f"board.{k}") for k in PAGE_TEXTS}
        return web.json_response(
            {"user": session.user_id, "csrf": session.csrf, "locale": locale, "texts": texts}
        )

    async def _tasks(self, request: web.Request) -> web.StreamResponse:
        archived = request.query.get("archived") == "1"
        rows = await self._data.tasks(request[SESSION_KEY].user_id, archived)
        return web.json_response({"tasks": rows})

    async def _tasks_stream(self, request: web.Request) -> web.StreamResponse:
        archived = request.query.get("archived") == "1"
        return await self._streams.tasks(request, request[SESSION_KEY].user_id, archived)

    async def _task(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        return web.json_response(await self._data.page(user_id, task))

    async def _transcript(self, request: web.Request) -> web.StreamResponse:
        _user, task = await self._own(request)
        start, limit = _int(request.query.get("cursor")), _int(request.query.get("limit"), 500)
        items, cursor = await self._data.transcript(task.id, start, limit)
        more = cursor != start and bool(await self._data.store.transcript.after(task.id, cursor, 1))
        return web.json_response({"items": items, "cursor": cursor, "more": more})

    async def _diff(self, request: web.Request) -> web.StreamResponse:
        _user, task = await self._own(request)
        return web.json_response(await self._data.diff(task))

    async def _task_stream(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        cursor = _int(request.query.get("cursor"))
        return await self._streams.task(request, user_id, task.id, cursor)

    # -- actions -------------------------------------------------------------------------------
    async def _answer(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        body = await _json(request)
        qid = _int(body.get("qid"))
        question = await self._data.store.questions.get(qid)
        if question is None or question.task_id != task.id:
            raise UserInputError("callback.stale")
        if "option" in body:
            key = await self._actions.pick(user_id, qid, _int(body.get("option"), -1))
        else:
            try:
                choice = ApprovalChoice(str(body.get("choice")))
            except ValueError as exc:
                raise UserInputError("callback.stale") from exc
            key = await self._actions.approve(user_id, qid, choice)
        return await self._done(user_id, key)

    async def _followup(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        prompt = str((await _json(request)).get("prompt", ""))
        turn = await self._actions.follow_up(user_id, task.id, prompt)
        return web.json_response({"ok": True, "turn": turn.seq})

    async def _cancel(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        await self._actions.cancel(user_id, task.id)
        return web.json_response({"ok": True})

    async def _merge(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        return web.json_response({"ok": await self._actions.merge(user_id, task.id)})

    async def _discard(self, request: web.Request) -> web.StreamResponse:
        user_id, task = await self._own(request)
        confirmed = bool((await _json(request)).get("confirmed"))
        return web.json_response({"ok": await self._actions.discard(user_id, task.id, confirmed)})

    async def _done(self, user_id: int, key: str) -> web.StreamResponse:
        locale = await self._data.locale(user_id)
        return web.json_response({"ok": True, "text": plain(self._data.texts.get(locale, key))})

    async def _own(self, request: web.Request) -> tuple[int, Task]:
        user_id = request[SESSION_KEY].user_id
        task = await self._data.own(user_id, int(request.match_info["id"]))
        if task is None:
            raise TaskNotFound(request.match_info["id"])
        return user_id, task


async def _secure(_request: web.Request, response: web.StreamResponse) -> None:
    """The security headers on every response, pages, JSON, streams and static files alike."""
    response.headers.update(SECURITY_HEADERS)


def _token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return header.removeprefix("Bearer ").strip()
    return request.cookies.get(COOKIE)


def _set_cookie(response: web.StreamResponse, token: str, secure: bool) -> None:
    response.set_cookie(
        COOKIE,
        token,
        max_age=int(SESSION_TTL_S),
        path="/",
        httponly=True,
        samesite="Strict",
        secure=secure,
    )


async def _json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except ValueError as exc:
        raise UserInputError("callback.stale") from exc
    return body if isinstance(body, dict) else {}


def _int(value: object, default: int = 0) -> int:
    try:
        return int(str(value))
    except ValueError:
        return default
