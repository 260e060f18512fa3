"""Telegram's pace, for the outbox: per chat about one message a second (groups one per three
seconds), a chat told to wait by a 429 waits that long, and overall under 25 calls a second
(a token bucket, so a lone call never waits)."""

from __future__ import annotations

import asyncio
import time

GLOBAL_BURST = 5.0


class Pace:
    def __init__(self, chat_interval_s: float, group_interval_s: float, per_second: float) -> None:
        self._chat_interval_s = chat_interval_s
        self._group_interval_s = group_interval_s
        self._per_second = per_second
        self._tokens = GLOBAL_BURST
        self._refilled = time.monotonic()
        self._next_ok: dict[int, float] = {}

    def ready_in(self, chat_id: int) -> float:
        """Seconds until this chat may be sent to (zero or less: now)."""
        return self._next_ok.get(chat_id, 0.0) - time.monotonic()

    def sent(self, chat_id: int) -> None:
        interval = self._group_interval_s if chat_id < 0 else self._chat_interval_s
        self._next_ok[chat_id] = time.monotonic() + interval

    def told_to_wait(self, chat_id: int, seconds: float) -> None:
        self._next_ok[chat_id] = time.monotonic() + seconds

    async def take(self) -> None:
        """Wait for the overall pace to allow one more call."""
        while True:
            now = time.monotonic()
            self._tokens = min(
                GLOBAL_BURST, self._tokens + (now - self._refilled) * self._per_second
            )
            self._refilled = now
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await asyncio.sleep((1 - self._tokens) / self._per_second)
