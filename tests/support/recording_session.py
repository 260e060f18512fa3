"""A recording aiogram session for the unit tier: answers every method like Telegram would and
keeps what the bot sent; failures can be queued per method name."""

from __future__ import annotations

import itertools
import json
import time
from collections import deque
from collections.abc import AsyncGenerator
from typing import Any

from aiogram import Bot
from aiogram.client.session.base import BaseSession
from aiogram.methods import TelegramMethod
from aiogram.methods.base import TelegramType

BOT_USER = {"id": 123456, "is_bot": True, "first_name": "Detach", "username": "detach_test_bot"}


class RecordingSession(BaseSession):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[TelegramMethod[Any]] = []
        self._ids = itertools.count(1000)
        self._failures: deque[tuple[str, int, str, int | None]] = deque()
        self.mark = 0

    def fail_next(
        self, method: str, code: int, description: str, retry_after: int | None = None
    ) -> None:
        self._failures.append((method, code, description, retry_after))

    def sent(self, method: str = "SendMessage") -> list[Any]:
        return [c for c in self.calls if type(c).__name__ == method]

    def texts(self) -> list[str]:
        return [c.text for c in self.sent()]

    def new_texts(self) -> str:
        """Every text sent since ``mark`` (set by the tests' ``feed``), joined: a background
        task's card may be delivered between a command and its reply."""
        return "\n---\n".join(
            c.text for c in self.calls[self.mark :] if type(c).__name__ == "SendMessage"
        )

    async def make_request(
        self, bot: Bot, method: TelegramMethod[TelegramType], timeout: int | None = None
    ) -> TelegramType:
        self.calls.append(method)
        name = type(method).__name__
        if self._failures and self._failures[0][0] == name:
            _, code, description, retry_after = self._failures.popleft()
            body: dict[str, Any] = {"ok": False, "error_code": code, "description": description}
            if retry_after is not None:
                body["parameters"] = {"retry_after": retry_after}
            self.check_response(bot, method, code, json.dumps(body))
        response = self.check_response(
            bot, method, 200, json.dumps({"ok": True, "result": self._result(method)})
        )
        return response.result  # type: ignore[return-value]

    def _result(self, method: TelegramMethod[Any]) -> Any:
        name = type(method).__name__
        if name == "GetMe":
            return BOT_USER
        if name in ("SendMessage", "SendDocument", "EditMessageText"):
            chat_id = getattr(method, "chat_id", 0)
            return {
                "message_id": getattr(method, "message_id", None) or next(self._ids),
                "date": int(time.time()),
                "chat": {"id": chat_id, "type": "private"},
                "from": BOT_USER,
                "text": getattr(method, "text", None) or "",
            }
        return True

    async def close(self) -> None:
        pass

    async def stream_content(
        self,
        url: str,
        headers: dict[str, Any] | None = None,
        timeout: int = 30,
        chunk_size: int = 65536,
        raise_for_status: bool = True,
    ) -> AsyncGenerator[bytes, None]:
        yield b""
