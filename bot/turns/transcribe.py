"""A turn's transcript entries on their way to the store: in batches (one write per
``size`` events) and never older than ``flush_s`` (a board page shows a running turn live,
and a long tool run must not hold back the line that started it). The store redacts them
(``Store.redact``): a transcript never stores a secret value."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Any

from bot.store import Store

Entry = tuple[str, dict[str, Any]]


class TranscriptBatch:
    """Entries are written in the order added, by one writer at a time; whatever is left is
    written on exit, also when the turn is cancelled."""

    def __init__(
        self,
        store: Store,
        task_id: int,
        turn_id: int,
        size: int = 25,
        flush_s: float = 0.3,
    ) -> None:
        self._store = store
        self._task_id = task_id
        self._turn_id = turn_id
        self._size = size
        self._flush_s = flush_s
        self._waiting: list[Entry] = []
        self._writing = asyncio.Lock()
        self._done = asyncio.Event()
        self._ticker: asyncio.Task[None] | None = None

    async def __aenter__(self) -> TranscriptBatch:
        self._ticker = asyncio.create_task(self._tick(), name=f"transcript {self._task_id}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._done.set()
        if self._ticker is not None:
            await asyncio.shield(self._ticker)
        await asyncio.shield(self.flush())

    async def add(self, entry: Entry) -> None:
        self._waiting.append(entry)
        if len(self._waiting) >= self._size:
            await self.flush()

    async def flush(self) -> None:
        async with self._writing:
            entries, self._waiting = self._waiting, []
            await self._store.transcript.append(self._task_id, self._turn_id, entries)

    async def _tick(self) -> None:
        while not self._done.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._done.wait(), self._flush_s)
            if self._waiting:
                await self.flush()
