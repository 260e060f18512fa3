"""Bounded retries for every Bot API call the bot makes (replies and notifications alike):
429 waits ``retry_after``; 5xx, HTML error pages and network errors back off. getUpdates is left
to aiogram's own polling backoff."""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from typing import Any

from aiogram import Bot
from aiogram.client.session.middlewares.base import BaseRequestMiddleware, NextRequestMiddlewareType
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramNetworkError,
    TelegramRetryAfter,
    TelegramServerError,
)
from aiogram.methods import GetUpdates, TelegramMethod

log = logging.getLogger(__name__)
NO_RETRY: ContextVar[bool] = ContextVar("detach_no_retry", default=False)  # the outbox retries


class RetryMiddleware(BaseRequestMiddleware):
    def __init__(self, attempts: int = 5, max_wait_s: float = 60.0) -> None:
        self._attempts = attempts
        self._max_wait_s = max_wait_s

    async def __call__(
        self, make_request: NextRequestMiddlewareType[Any], bot: Bot, method: TelegramMethod[Any]
    ) -> Any:
        if isinstance(method, GetUpdates) or NO_RETRY.get():
            return await make_request(bot, method)
        for attempt in range(1, self._attempts + 1):
            try:
                return await make_request(bot, method)
            except TelegramRetryAfter as exc:
                if attempt == self._attempts:
                    raise
                wait_s = min(float(exc.retry_after), self._max_wait_s)
            except (TelegramServerError, TelegramNetworkError, ClientDecodeError) as exc:
                if attempt == self._attempts:
                    raise
                wait_s = min(2.0 ** (attempt - 1), self._max_wait_s)
                log.info(
                    "%s failed (%s); retry %s in %.0fs",
                    type(method).__name__,
                    type(exc).__name__,
                    attempt,
                    wait_s,
                )
            await asyncio.sleep(wait_s)
        raise AssertionError("unreachable")
