"""Reaching Telegram at start: a token Telegram rejects is a setup mistake said in one line;
no network is waited out, with backoff, however long it takes."""

from __future__ import annotations

import asyncio
import logging

from aiogram import Bot
from aiogram.exceptions import (
    TelegramNetworkError,
    TelegramServerError,
    TelegramUnauthorizedError,
)
from aiogram.types import User

from bot.errors import ConfigError
from bot.telegram.retry import NO_RETRY

log = logging.getLogger(__name__)

REJECTED = (
    "Telegram rejected the bot token (401 Unauthorized): it was revoked or mistyped. Check "
    "DETACH_BOT_TOKEN; @BotFather's /mybots → API Token shows the current one."
)


async def reach_telegram(bot: Bot, first_wait_s: float = 1.0, max_wait_s: float = 60.0) -> User:
    """``getMe`` until Telegram answers; one log line per failed try (the error's kind only:
    its text may hold the URL, and the URL holds the token)."""
    wait_s = first_wait_s
    no_retry = NO_RETRY.set(True)  # this loop is the retry
    try:
        while True:
            try:
                me = await bot.me()  # cached: polling does not ask again
                log.info("connected to Telegram as @%s", me.username)
                return me
            except TelegramUnauthorizedError:
                raise ConfigError(REJECTED) from None
            except (TelegramNetworkError, TelegramServerError, OSError, TimeoutError) as exc:
                log.warning(
                    "cannot reach Telegram (%s); trying again in %.0f s",
                    type(exc).__name__,
                    wait_s,
                )
            await asyncio.sleep(wait_s)
            wait_s = min(wait_s * 2, max_wait_s)
    finally:
        NO_RETRY.reset(no_retry)
