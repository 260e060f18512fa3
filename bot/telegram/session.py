"""The HTTP session to the Bot API: aiogram's, keeping each parametrised ``Response[T]`` model it
builds. aiogram asks pydantic for ``Response[method.__returning__]`` on every call; pydantic
caches generic models in a WeakValueDictionary, so once garbage-collected the model is built
again (about 8 ms of schema building on this machine, measured with cProfile: 23 rebuilds in 10
tasks). One strong reference per return type makes that a one-time cost."""

from __future__ import annotations

from typing import Any

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.methods import Response, TelegramMethod


class BotApiSession(AiohttpSession):
    _kept: dict[Any, type] = {}  # return type -> Response[return type], for the process

    def check_response(
        self, bot: Bot, method: TelegramMethod[Any], status_code: int, content: str
    ) -> Response[Any]:
        returning = method.__returning__
        if returning not in self._kept:
            self._kept[returning] = Response[returning]  # type: ignore[valid-type]
        return super().check_response(bot, method, status_code, content)
