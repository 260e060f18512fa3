"""The board's gate (aiohttp): sign-in by a one-time link or a Telegram Mini App's
``initData``, sign-out, the page shell, and the check every other request passes. Nothing but
the public paths answers without a session: a page answers 401 (its body is the shell), JSON
and streams 401, a state-changing request without the session's CSRF token 403; a request's
``TaskNotFound`` answers 404, its ``Malformed`` 400 and its ``UserInputError`` 409 with the text
in the user's /lang; aiohttp's own errors under /api/ answer JSON too. A signed-in request tells
``on_signed_in`` its connection. Every response carries the security headers."""

from __future__ import annotations

import asyncio
import hmac
import html
import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from bot.board.auth import COOKIE, SESSION_TTL_S, BoardAuth, Refused, Session
from bot.board.inputs import Malformed
from bot.board.views import BoardData
from bot.errors import TaskNotFound, UserInputError
from bot.telegram.render import plain

log = logging.getLogger(__name__)
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


class Gate:
    """Who a request is: ``signed_in`` is the middleware, the rest are the sign-in routes."""

    def __init__(
        self,
        auth: BoardAuth,
        data: BoardData,
        shell_html: str,
        url: Callable[[], str],
        on_signed_in: Callable[[asyncio.Transport | None], None],
    ) -> None:
        """``shell_html``: the page shell's template; ``url``: where a browser reaches the
        board now (its sign-in cookie is ``Secure`` behind https)."""
        self._auth = auth
        self._data = data
        self._shell_html = shell_html
        self._url = url
        self._on_signed_in = on_signed_in

    @web.middleware
    async def signed_in(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        session = self._auth.session(_token(request))
        if session is not None:
            self._on_signed_in(request.transport)
        if request.path.startswith(PUBLIC):
            return await handler(request)
        if session is None:
            if request.path.startswith("/api/") or request.method != "GET":
                return web.json_response({"error": "signin"}, status=401)
            return await self._shell_page(request, self._auth.known(_token(request)), 401)
        if request.method == "POST":
            sent = request.headers.get("X-CSRF-Token", "")
            if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
                return web.json_response({"error": "csrf"}, status=403)
        request[SESSION_KEY] = session
        return await self._answered(request, session, handler)

    async def _answered(
        self, request: web.Request, session: Session, handler: Handler
    ) -> web.StreamResponse:
        """The handler's response, or its refusal as JSON."""
        try:
            return await handler(request)
        except TaskNotFound:
            return web.json_response({"error": "not_found"}, status=404)
        except Malformed as exc:
            return web.json_response({"error": "malformed", "field": exc.field}, status=400)
        except web.HTTPException as exc:
            if exc.status < 400 or not request.path.startswith("/api/"):
                raise
            return web.json_response({"error": exc.reason}, status=exc.status)
        except UserInputError as exc:
            locale = await self._data.locale(session.user_id)
            text = self._data.texts.get(locale, exc.key, **exc.params)
            return web.json_response({"error": exc.key, "text": plain(text)}, status=409)

    async def shell(self, request: web.Request) -> web.StreamResponse:
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

    async def signin(self, request: web.Request) -> web.StreamResponse:
        link = request.query.get("t", "")
        try:
            token, _session = self._auth.redeem(link)
        except Refused as exc:
            log.info("board sign-in refused: %s", exc)
            return await self._shell_page(request, self._auth.known(_token(request), link), 403)
        response = web.HTTPSeeOther("/")
        _set_cookie(response, token, secure=self._url().startswith("https://"))
        raise response

    async def webapp(self, request: web.Request) -> web.StreamResponse:
        form = await request.post()
        try:
            token, session = self._auth.from_init_data(str(form.get("initData", "")))
        except Refused as exc:
            log.info("board Mini App sign-in refused: %s", exc)
            return web.json_response({"error": "refused"}, status=403)
        return web.json_response({"token": token, "csrf": session.csrf})

    async def signout(self, request: web.Request) -> web.StreamResponse:
        self._auth.close(_token(request) or "")
        response = web.json_response({"ok": True})
        response.del_cookie(COOKIE, path="/")
        return response


async def secure_headers(_request: web.Request, response: web.StreamResponse) -> None:
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
