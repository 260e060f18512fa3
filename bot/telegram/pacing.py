"""Telegram's pace, for the outbox: per chat about one message a second (groups one per three
seconds) with a short burst allowed, as Telegram allows one ("short bursts ... eventually 429"),
so the two or three messages of a short task (acknowledgement, card, the acknowledgement's last
edit) go out at once instead of a second apart; a chat told to wait by a 429 waits that long;
overall under 25 calls a second. All three are token buckets, so a lone call never waits."""

from __future__ import annotations

import asyncio
import time

GLOBAL_BURST = 5.0
CHAT_BURST = 3


class Pace:
    def __init__(
        self,
        chat_interval_s: float,
        group_interval_s: float,
        per_second: float,
        chat_burst: int = CHAT_BURST,
    ) -> None:
        self._chat_interval_s = chat_interval_s
        self._group_interval_s = group_interval_s
        self._per_second = per_second
        self._chat_burst = chat_burst
        self._tokens = GLOBAL_BURST
        self._refilled = time.monotonic()
        self._due: dict[int, float] = {}  # per chat, GCRA's "theoretical arrival time"

    def _interval(self, chat_id: int) -> float:
        return self._group_interval_s if chat_id < 0 else self._chat_interval_s

    def ready_in(self, chat_id: int) -> float:
        """Seconds until this chat may be sent to (zero or less: now)."""
        slack = self._interval(chat_id) * (self._chat_burst - 1)
        return self._due.get(chat_id, 0.0) - slack - time.monotonic()

    def sent(self, chat_id: int) -> None:
        now = time.monotonic()
        self._due[chat_id] = max(self._due.get(chat_id, 0.0), now) + self._interval(chat_id)

    def told_to_wait(self, chat_id: int, seconds: float) -> None:
        """After a 429 the chat waits the whole retry_after and then starts with one message."""
        until = time.monotonic() + seconds
        slack = self._interval(chat_id) * (self._chat_burst - 1)
        self._due[chat_id] = max(self._due.get(chat_id, 0.0), until + slack)

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
