"""A fake Telegram Bot API server on 127.0.0.1 for end-to-end tests of the real bot over HTTP.

It keeps chat state, long-polls getUpdates, and enforces Telegram's limits: 1-4096 characters of
text after HTML parsing, well-formed HTML, 64-byte callback data, and per-chat flood control with
real 429s and retry_after. The test plays the user with ``user_message`` and ``press`` and reads
what the bot did with ``wait_call`` and ``messages``.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from aiohttp import web

BOT_ID = 123456
TOKEN = f"{BOT_ID}:TEST-TOKEN"
JSON_FIELDS = {
    "reply_markup",
    "reply_parameters",
    "entities",
    "commands",
    "caption_entities",
    "link_preview_options",
    "allowed_updates",
}
ALLOWED_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "a",
    "code",
    "pre",
    "tg-spoiler",
    "span",
    "blockquote",
    "tg-emoji",
}


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    ok: bool
    result: Any
    at: float = field(default_factory=time.monotonic)


class _HTMLCheck(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.text: list[str] = []
        self.error: str | None = None

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        if tag not in ALLOWED_TAGS:
            self.error = self.error or f'Unsupported start tag "{tag}"'
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack.pop() != tag:
            self.error = self.error or f'Unexpected end tag "{tag}"'

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def visible_text(text: str, parse_mode: str | None) -> tuple[str, str | None]:
    """The text Telegram would show, and a parse error if Telegram would reject it."""
    if (parse_mode or "").upper() != "HTML":
        return text, None
    if re.search(r"&(?![a-zA-Z]+;|#\d+;|#x[0-9a-fA-F]+;)", text):
        return html.unescape(text), "can't parse entities: unescaped '&'"
    checker = _HTMLCheck()
    checker.feed(text)
    checker.close()
    if checker.stack and not checker.error:
        checker.error = f'Can\'t find end tag corresponding to start tag "{checker.stack[-1]}"'
    error = f"can't parse entities: {checker.error}" if checker.error else None
    return "".join(checker.text), error  # worded like Telegram's own


CHAOS_METHODS = ("sendMessage", "editMessageText", "deleteMessage", "sendDocument", "getUpdates")


class FakeTelegram:
    def __init__(
        self,
        flood_burst: int = 20,
        flood_per_s: float = 20.0,
        chaos_rate: float = 0.0,
        seed: int = 0,
    ) -> None:
        """``chaos_rate``: the share of sends, edits, deletes and getUpdates that fail at random
        (429, an HTML 502 page, a 500, a dropped connection), from ``seed``."""
        self.chaos_rate = chaos_rate
        self._rng = random.Random(seed)
        self.calls: list[Call] = []
        self.arrivals: list[tuple[str, float]] = []  # (method, time.monotonic()) as they come
        self.messages: dict[int, list[dict[str, Any]]] = {}
        self.callback_answers: dict[str, dict[str, Any]] = {}
        self.files: dict[str, bytes] = {}
        self._updates: list[dict[str, Any]] = []
        self._changed = asyncio.Condition()
        self._ids = itertools.count(1)
        self._update_ids = itertools.count(1)
        self._buckets: dict[int, tuple[float, float]] = {}
        self._flood = (flood_burst, flood_per_s)
        self._runner: web.AppRunner | None = None
        self.base_url = ""
        self.flood_429s = 0
        self.delivered: set[int] = set()
        self.deleted: list[int] = []
        self._faults: list[tuple[str, int, str, int | None, Callable[[dict[str, Any]], bool]]] = []
        self.blocks: list[tuple[str, int, str, int | None, Callable[[dict[str, Any]], bool]]] = []
        self._sandboxed: list[tuple[int, str]] = []  # (user, needle): see allow_sandboxed
        self.sandboxed_taps: list[int] = []  # the messages allow_sandboxed tapped
        self._taps: set[asyncio.Task[str]] = set()

    def block(
        self,
        method: str,
        code: int,
        description: str,
        where: Callable[[dict[str, Any]], bool] = lambda p: True,
    ) -> None:
        """Every call of ``method`` matching ``where`` fails until ``unblock``."""
        fault = (method, code, description, None, where)
        self._faults.append(fault)
        self.blocks.append(fault)

    def unblock(self) -> None:
        for fault in self.blocks:
            self._faults.remove(fault)
        self.blocks.clear()

    def fail_next(
        self,
        method: str,
        code: int,
        description: str,
        retry_after: int | None = None,
        where: Callable[[dict[str, Any]], bool] = lambda p: True,
    ) -> None:
        """The next call of ``method`` matching ``where`` fails like Telegram would."""
        self._faults.append((method, code, description, retry_after, where))

    def allow_sandboxed(self, user_id: int, needle: str = "") -> None:
        """``user_id`` taps Allow on the first card asking for a Bash command that contains
        ``needle`` and stays in the sandbox: one a sandboxed turn runs unasked. Claude 2.1.197
        parses a command against a 50 ms deadline (read in its binary) and asks for one whose
        parse ran out of it, as too complex (the likely cause): a loaded machine makes it ask
        (measured: 1 in 24 turns, eight at once beside four busy loops). For a test whose
        subject is not that ask; the command still runs in the sandbox. Once only: a sandbox
        that asks for every command still fails the test."""
        self._sandboxed.append((user_id, needle))

    def asked(self) -> list[Call]:
        """The approval cards sent (``allow_sandboxed``'s taps left out)."""
        return [
            c
            for c in self.calls
            if c.method == "sendMessage"
            and c.ok
            and "wants to use" in c.params["text"]
            and c.result["message_id"] not in self.sandboxed_taps
        ]

    def _tap_if_sandboxed(self, chat_id: int, message: dict[str, Any]) -> None:
        text = message["text"]  # (an English chat's card)
        if not self._sandboxed or self.sandboxed_taps:
            return
        if "wants to use Bash" not in text or "outside the sandbox" in text:
            return
        user_id = next((u for u, needle in self._sandboxed if needle in text), None)
        keys = (message.get("reply_markup") or {}).get("inline_keyboard", [])
        data = [b.get("callback_data", "") for row in keys for b in row]
        allow = [d for d in data if d.startswith("ap:") and d.endswith(":allow")]
        if user_id is None or not allow:
            return
        self.sandboxed_taps.append(message["message_id"])
        tap = asyncio.get_running_loop().create_task(
            self.press(chat_id, message["message_id"], allow[0], user_id)
        )
        self._taps.add(tap)
        tap.add_done_callback(self._taps.discard)

    async def __aenter__(self) -> FakeTelegram:
        app = web.Application(client_max_size=60 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._handle)
        app.router.add_get("/file/bot{token}/{path:.*}", self._file)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        async with self._changed:
            self._updates.append({"_shutdown": True})
            self._changed.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- the user's side --------------------------------------------------------------------
    def user(self, user_id: int, language_code: str = "en") -> dict[str, Any]:
        return {
            "id": user_id,
            "is_bot": False,
            "first_name": f"User{user_id}",
            "language_code": language_code,
        }

    async def user_message(
        self,
        text: str,
        user_id: int,
        chat_id: int | None = None,
        reply_to_message_id: int | None = None,
        language_code: str = "en",
    ) -> dict[str, Any]:
        chat_id = chat_id or user_id
        message = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id == user_id else "group"},
            "from": self.user(user_id, language_code),
            "text": text,
        }
        if text.startswith("/"):
            message["entities"] = [
                {"type": "bot_command", "offset": 0, "length": len(text.split()[0])}
            ]
        if reply_to_message_id is not None:
            message["reply_to_message"] = self.find_message(chat_id, reply_to_message_id)
        self.messages.setdefault(chat_id, []).append(message)
        await self._push({"message": message})
        return message

    async def user_document(
        self,
        data: bytes,
        filename: str,
        user_id: int,
        caption: str | None = None,
        reply_to_message_id: int | None = None,
    ) -> dict[str, Any]:
        """The user sends a file (with a caption, maybe as a reply); the bot may download it
        (getFile, then the file URL) like from Telegram."""
        file_id = f"user-file-{next(self._ids)}"
        self.files[file_id] = data
        message: dict[str, Any] = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": user_id, "type": "private"},
            "from": self.user(user_id),
            "document": {
                "file_id": file_id,
                "file_unique_id": file_id,
                "file_name": filename,
                "file_size": len(data),
            },
        }
        if caption is not None:
            message["caption"] = caption
            if caption.startswith("/"):
                message["caption_entities"] = [
                    {"type": "bot_command", "offset": 0, "length": len(caption.split()[0])}
                ]
        if reply_to_message_id is not None:
            message["reply_to_message"] = self.find_message(user_id, reply_to_message_id)
        self.messages.setdefault(user_id, []).append(message)
        await self._push({"message": message})
        return message

    async def user_voice(
        self,
        data: bytes,
        user_id: int,
        duration_s: int,
        kind: str = "voice",
        language_code: str = "en",
    ) -> dict[str, Any]:
        """The user sends a voice note (``kind="audio"``: an audio file) as Telegram describes
        it (file_id, duration in seconds, OGG/Opus); the bot downloads it with getFile."""
        file_id = f"user-{kind}-{next(self._ids)}"
        self.files[file_id] = data
        sound: dict[str, Any] = {
            "file_id": file_id,
            "file_unique_id": file_id.replace("-", ""),
            "duration": duration_s,
            "mime_type": "audio/ogg",
            "file_size": len(data),
        }
        if kind == "audio":
            sound["file_name"] = "note.ogg"
        message: dict[str, Any] = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": user_id, "type": "private"},
            "from": self.user(user_id, language_code),
            kind: sound,
        }
        self.messages.setdefault(user_id, []).append(message)
        await self._push({"message": message})
        return message

    async def user_photo(
        self,
        data: bytes,
        user_id: int,
        caption: str | None = None,
        reply_to_message_id: int | None = None,
    ) -> dict[str, Any]:
        """The user sends a photo (Telegram's sizes of it; the bot downloads the largest)."""
        file_id = f"user-photo-{next(self._ids)}"
        self.files[file_id] = data
        sizes = [
            {"file_id": f"{file_id}-s", "file_unique_id": f"{file_id}s", "width": 90, "height": 60},
            {
                "file_id": file_id,
                "file_unique_id": file_id.replace("-", ""),
                "width": 1280,
                "height": 853,
                "file_size": len(data),
            },
        ]
        message: dict[str, Any] = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": user_id, "type": "private"},
            "from": self.user(user_id),
            "photo": sizes,
        }
        if caption is not None:
            message["caption"] = caption
        if reply_to_message_id is not None:
            message["reply_to_message"] = self.find_message(user_id, reply_to_message_id)
        self.messages.setdefault(user_id, []).append(message)
        await self._push({"message": message})
        return message

    async def press(
        self, chat_id: int, message_id: int, data: str, user_id: int, language_code: str = "en"
    ) -> str:
        query_id = f"cb{next(self._ids)}"
        await self._push(
            {
                "callback_query": {
                    "id": query_id,
                    "from": self.user(user_id, language_code),
                    "chat_instance": f"ci{chat_id}",
                    "message": self.find_message(chat_id, message_id),
                    "data": data,
                }
            }
        )
        return query_id

    def find_message(self, chat_id: int, message_id: int) -> dict[str, Any]:
        for message in self.messages.get(chat_id, []):
            if message["message_id"] == message_id:
                return message
        raise KeyError(f"no message {message_id} in chat {chat_id}")

    def unconfirmed(self) -> list[int]:
        """Update ids the bot has not confirmed yet (Telegram would send them again)."""
        return [u["update_id"] for u in self._updates if "_shutdown" not in u]

    def bot_messages(self, chat_id: int) -> list[dict[str, Any]]:
        return [m for m in self.messages.get(chat_id, []) if m["from"]["id"] == BOT_ID]

    async def wait_call(
        self,
        method: str,
        where: Callable[[Call], bool] = lambda c: True,
        timeout_s: float = 30.0,
        after: int = 0,
    ) -> Call:
        """The first successful call of ``method`` (from index ``after``) matching ``where``."""
        async with asyncio.timeout(timeout_s):
            async with self._changed:
                while True:
                    for call in self.calls[after:]:
                        if call.method == method and call.ok and where(call):
                            return call
                    await self._changed.wait()

    async def wait_text(
        self, chat_id: int, needle: str, timeout_s: float = 30.0, after: int = 0
    ) -> Call:
        return await self.wait_call(
            "sendMessage",
            lambda c: int(c.params["chat_id"]) == chat_id and needle in c.params["text"],
            timeout_s,
            after,
        )

    async def wait_shown(
        self, chat_id: int, needle: str, timeout_s: float = 30.0, after: int = 0
    ) -> Call:
        """The first message sent, or edited, to show ``needle``: a message the bot edits to
        its end (``/cancel``'s "cancelling…" becomes the card) may never be sent saying it."""
        async with asyncio.timeout(timeout_s):
            async with self._changed:
                while True:
                    for call in self.calls[after:]:
                        if (
                            call.method in ("sendMessage", "editMessageText")
                            and call.ok
                            and int(call.params["chat_id"]) == chat_id
                            and needle in call.params["text"]
                        ):
                            return call
                    await self._changed.wait()

    # -- the bot's side ---------------------------------------------------------------------
    async def _push(self, body: dict[str, Any]) -> None:
        async with self._changed:
            self._updates.append({"update_id": next(self._update_ids), **body})
            self._changed.notify_all()

    async def _handle(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != TOKEN:
            return self._error(401, "Unauthorized")
        params = await self._params(request)
        method = request.match_info["method"]
        self.arrivals.append((method, time.monotonic()))  # a long poll is recorded when it ends
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return self._error(404, "Not Found")
        if method in CHAOS_METHODS and self._rng.random() < self.chaos_rate:
            return await self._chaos(request, method, params)
        fault = next((f for f in self._faults if f[0] == method and f[4](params)), None)
        if fault is not None:
            if fault not in self.blocks:
                self._faults.remove(fault)
            await self._record(method, params, False, fault[2])
            return self._error(fault[1], fault[2], fault[3])
        try:
            result = await handler(params)
        except _ApiError as err:
            await self._record(method, params, False, err.description)
            return self._error(err.code, err.description, err.retry_after)
        await self._record(method, params, True, result)
        return web.json_response({"ok": True, "result": result})

    async def _chaos(
        self, request: web.Request, method: str, params: dict[str, Any]
    ) -> web.Response:
        """One of the faults Telegram and the network really produce, before the call runs."""
        kind = self._rng.choice(("429", "502-html", "500", "drop"))
        await self._record(method, params, False, f"chaos {kind}")
        if kind == "429":
            return self._error(429, "Too Many Requests: retry after 1", 1)
        if kind == "502-html":
            return web.Response(
                status=502,
                content_type="text/html",
                text="<html><body><h1>502 Bad Gateway</h1></body></html>",
            )
        if kind == "500":
            return self._error(500, "Internal Server Error")
        if request.transport is not None:
            request.transport.close()  # the connection drops with no answer
        return web.Response(status=500)

    async def _record(self, method: str, params: dict[str, Any], ok: bool, result: Any) -> None:
        async with self._changed:
            self.calls.append(Call(method, params, ok, result))
            self._changed.notify_all()

    async def _params(self, request: web.Request) -> dict[str, Any]:
        if request.content_type == "application/json":
            return await request.json()
        form = await request.post()
        params: dict[str, Any] = {}
        for key, value in form.items():
            if isinstance(value, web.FileField):
                params[key] = value.file.read()
            elif key in JSON_FIELDS:
                params[key] = json.loads(value)
            else:
                params[key] = value
        return params

    @staticmethod
    def _error(code: int, description: str, retry_after: int | None = None) -> web.Response:
        body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
        if retry_after is not None:
            body["parameters"] = {"retry_after": retry_after}
        return web.json_response(body, status=code)

    def _take_flood_token(self, chat_id: int) -> None:
        burst, rate = self._flood
        now = time.monotonic()
        tokens, last = self._buckets.get(chat_id, (float(burst), now))
        tokens = min(float(burst), tokens + (now - last) * rate)
        if tokens < 1:
            self.flood_429s += 1
            wait = max(1, int((1 - tokens) / rate + 0.999))
            raise _ApiError(429, f"Too Many Requests: retry after {wait}", wait)
        self._buckets[chat_id] = (tokens - 1, now)

    def _check_text(self, text: str, parse_mode: str | None, max_len: int = 4096) -> None:
        visible, error = visible_text(text, parse_mode)
        if error:
            raise _ApiError(400, f"Bad Request: {error}")
        length = len(visible.encode("utf-16-le")) // 2
        if length == 0 and max_len == 4096:
            raise _ApiError(400, "Bad Request: message text is empty")
        if length > max_len:
            raise _ApiError(400, "Bad Request: message is too long")

    @staticmethod
    def _check_markup(markup: dict[str, Any] | None) -> None:
        for row in (markup or {}).get("inline_keyboard", []):
            for button in row:
                data = button.get("callback_data")
                if data is not None and not 1 <= len(data.encode()) <= 64:
                    raise _ApiError(400, "Bad Request: BUTTON_DATA_INVALID")

    def _bot_message(self, chat_id: int, **fields: Any) -> dict[str, Any]:
        message = {
            "message_id": next(self._ids),
            "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private"},
            "from": {
                "id": BOT_ID,
                "is_bot": True,
                "first_name": "Detach",
                "username": "detach_test_bot",
            },
            **fields,
        }
        self.messages.setdefault(chat_id, []).append(message)
        return message

    def _thread_fields(self, chat_id: int, p: dict[str, Any]) -> dict[str, Any]:
        """A send's ``message_thread_id``: no chat here has topics, so Telegram refuses one
        (``tests/support/fake_forum.py`` has them)."""
        if p.get("message_thread_id"):
            raise _ApiError(400, "Bad Request: message thread not found")
        return {}

    # -- Bot API methods --------------------------------------------------------------------
    async def _m_getMe(self, _p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        return {"id": BOT_ID, "is_bot": True, "first_name": "Detach", "username": "detach_test_bot"}

    async def _m_deleteWebhook(self, _p: dict[str, Any]) -> bool:  # noqa: N802
        return True

    async def _m_setMyCommands(self, _p: dict[str, Any]) -> bool:  # noqa: N802
        return True

    async def _m_sendChatAction(self, _p: dict[str, Any]) -> bool:  # noqa: N802
        return True

    async def _m_answerCallbackQuery(self, p: dict[str, Any]) -> bool:  # noqa: N802
        self.callback_answers[p["callback_query_id"]] = p
        return True

    async def _m_sendMessage(self, p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        chat_id = int(p["chat_id"])
        self._check_text(p.get("text", ""), p.get("parse_mode"))
        self._check_markup(p.get("reply_markup"))
        self._take_flood_token(chat_id)
        visible, _ = visible_text(p["text"], p.get("parse_mode"))
        fields: dict[str, Any] = {"text": visible, **self._thread_fields(chat_id, p)}
        if (p.get("reply_markup") or {}).get("inline_keyboard"):  # Message carries only these
            fields["reply_markup"] = p["reply_markup"]
        message = self._bot_message(chat_id, **fields)
        self._tap_if_sandboxed(chat_id, message)
        return message

    async def _m_sendDocument(self, p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        chat_id = int(p["chat_id"])
        if p.get("caption"):
            self._check_text(p["caption"], p.get("parse_mode"), max_len=1024)
        self._take_flood_token(chat_id)
        file_id = f"file{next(self._ids)}"
        document = p["document"]
        if isinstance(document, str) and document.startswith("attach://"):
            document = p[document.removeprefix("attach://")]
        if not isinstance(document, bytes):
            raise _ApiError(400, "Bad Request: wrong file identifier/HTTP URL specified")
        if len(document) > 50 * 1024 * 1024:
            raise _ApiError(413, "Request Entity Too Large")
        self.files[file_id] = document
        return self._bot_message(
            chat_id,
            **self._thread_fields(chat_id, p),
            document={"file_id": file_id, "file_unique_id": file_id},
            caption=p.get("caption"),
        )

    async def _m_editMessageText(self, p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        message = self.find_message(int(p["chat_id"]), int(p["message_id"]))
        self._check_text(p["text"], p.get("parse_mode"))
        visible, _ = visible_text(p["text"], p.get("parse_mode"))
        if visible == message.get("text") and p.get("reply_markup") == message.get("reply_markup"):
            raise _ApiError(400, "Bad Request: message is not modified")
        message["text"] = visible
        message.pop("reply_markup", None)
        if p.get("reply_markup"):
            message["reply_markup"] = p["reply_markup"]
        return message

    async def _m_editMessageReplyMarkup(self, p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        message = self.find_message(int(p["chat_id"]), int(p["message_id"]))
        if p.get("reply_markup") == message.get("reply_markup"):
            raise _ApiError(400, "Bad Request: message is not modified")
        message.pop("reply_markup", None)
        if p.get("reply_markup"):
            message["reply_markup"] = p["reply_markup"]
        return message

    async def _m_getFile(self, p: dict[str, Any]) -> dict[str, Any]:  # noqa: N802
        data = self.files.get(str(p["file_id"]))
        if data is None:
            raise _ApiError(400, "Bad Request: invalid file_id")
        if len(data) > 20 * 1024 * 1024:  # the Bot API's download limit
            raise _ApiError(400, "Bad Request: file is too big")
        return {
            "file_id": p["file_id"],
            "file_unique_id": p["file_id"],
            "file_size": len(data),
            "file_path": f"documents/{p['file_id']}",
        }

    async def _file(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != TOKEN:
            return web.Response(status=401)
        data = self.files.get(request.match_info["path"].removeprefix("documents/"))
        return web.Response(body=data) if data is not None else web.Response(status=404)

    async def _m_deleteMessage(self, p: dict[str, Any]) -> bool:  # noqa: N802
        message = self.find_message(int(p["chat_id"]), int(p["message_id"]))
        self.messages[int(p["chat_id"])].remove(message)
        self.deleted.append(int(p["message_id"]))
        return True

    async def _m_getUpdates(self, p: dict[str, Any]) -> list[dict[str, Any]]:  # noqa: N802
        offset = int(p.get("offset") or 0)
        if offset:  # like Telegram: an offset confirms, and forgets, every update before it
            self._updates = [
                u for u in self._updates if "_shutdown" in u or u["update_id"] >= offset
            ]
        timeout_s = min(float(p.get("timeout") or 0), 30.0)
        deadline = time.monotonic() + timeout_s
        async with self._changed:
            while True:
                if any("_shutdown" in u for u in self._updates):
                    return []
                pending = [u for u in self._updates if u["update_id"] >= offset]
                self.delivered.update(u["update_id"] for u in pending)
                remaining = deadline - time.monotonic()
                if pending or remaining <= 0:
                    return pending[:100]
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except TimeoutError:
                    return []


class _ApiError(Exception):
    def __init__(self, code: int, description: str, retry_after: int | None = None) -> None:
        super().__init__(description)
        self.code = code
        self.description = description
        self.retry_after = retry_after
