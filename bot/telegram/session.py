"""The HTTP session to the Bot API: aiogram's, with aiohttp's own TLS context, keeping each
parametrised ``Response[T]`` model it builds.

TLS: aiogram's session builds a context of its own from certifi's bundle, beside the one aiohttp
builds from the system's at import: 117 more certificates parsed, 1.2 MB and ~20 ms of the start
here. This session uses aiohttp's (``ssl=True``: the system's trust store, verified, as git and
curl use); certifi's only when the system has no trust store at all.

Answers: read by ``bot.telegram.answers`` through the validators of the types they hold, not
through one ``Response[T]`` model per return type (each a copy of the types inside it: 3 MB
for the Update and Message ones). A return type of another shape still goes through aiogram;
pydantic caches such generic models in a WeakValueDictionary, so once garbage-collected one is
built again (about 8 ms of schema building): one strong reference per return type makes that a
one-time cost."""

from __future__ import annotations

import ssl
from http import HTTPStatus
from pathlib import Path
from typing import Any

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.session.base import BaseSession
from aiogram.exceptions import ClientDecodeError
from aiogram.methods import Response, TelegramMethod
from aiohttp import TCPConnector
from pydantic import ValidationError

from bot.telegram.answers import NOT_READ, envelope_type, raise_error, read_result

CONNECTIONS = 100  # aiogram's default limit


class BotApiSession(AiohttpSession):
    _kept: dict[Any, type] = {}  # return type -> Response[return type], for the process

    def __init__(self, **kwargs: Any) -> None:
        """AiohttpSession's state without its certifi context (no proxy: aiogram's ``proxy``
        setter still works). tests/test_session.py holds the attributes to aiogram's."""
        BaseSession.__init__(self, **kwargs)
        self._session = None
        self._connector_type = TCPConnector
        self._connector_init = {
            "ssl": _tls(),
            "limit": CONNECTIONS,
            "ttl_dns_cache": 3600,  # as aiogram: https://github.com/aiogram/aiogram/issues/1500
        }
        self._should_reset_connector = True
        self._proxy = None

    def check_response(
        self, bot: Bot, method: TelegramMethod[Any], status_code: int, content: str
    ) -> Response[Any]:
        try:
            data = self.json_loads(content)
        except Exception:  # noqa: BLE001 — aiogram's own path says it (ClientDecodeError)
            return super().check_response(bot, method, status_code, content)
        context = {"bot": bot}
        try:
            answer = envelope_type().model_validate(data, context=context)
            if not (HTTPStatus.OK <= status_code <= HTTPStatus.IM_USED and answer.ok):
                raise_error(method, status_code, answer)
            result = read_result(method.__returning__, answer.result, context)
        except ValidationError as exc:
            raise ClientDecodeError("Failed to deserialize object", exc, data) from exc
        if result is NOT_READ:
            return self._as_aiogram(bot, method, status_code, content)
        return envelope_type().model_construct(ok=True, result=result)

    def _as_aiogram(
        self, bot: Bot, method: TelegramMethod[Any], status_code: int, content: str
    ) -> Response[Any]:
        """aiogram's way: a ``Response[T]`` model for the return type, kept for the process."""
        returning = method.__returning__
        if returning not in self._kept:
            self._kept[returning] = Response[returning]  # type: ignore[valid-type]
        return super().check_response(bot, method, status_code, content)


def _tls() -> ssl.SSLContext | bool:
    """True (aiohttp's verified context, the system's trust store) when the system has one;
    else a context from certifi's bundle."""
    paths = ssl.get_default_verify_paths()
    if any(p and Path(p).exists() for p in (paths.cafile, paths.capath)):
        return True
    import certifi  # noqa: PLC0415 — only on a system without a trust store

    return ssl.create_default_context(cafile=certifi.where())
