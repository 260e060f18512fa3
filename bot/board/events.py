"""Live updates: server-sent events that poll the store at a bounded interval.

The bot appends a turn's events to the transcript table in batches (``bot.turns``) and has no
in-process hook a second reader could subscribe to across processes (a scale-out worker writes
the same table from elsewhere), so a stream reads the table: every ``POLL_S`` the rows after
its cursor (an indexed range read) and a small signature of the task (status, cost, pending
questions). That keeps an update within ``POLL_S`` plus one read of the event, under the 1 s
the page promises, and bounds the load of an open page to two reads per ``POLL_S``.

A stream ends when its client goes, after ``STREAM_MAX_S`` (the browser's reader reconnects
with its cursor) or when the board closes."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from bot.board.views import BoardData
from bot.models import Task

POLL_S = 0.3
KEEPALIVE_S = 15.0
STREAM_MAX_S = 1800.0


class Streams:
    def __init__(self, data: BoardData, closing: asyncio.Event) -> None:
        self._data = data
        self._closing = closing

    async def task(
        self, request: web.Request, user_id: int, task: Task, cursor: int
    ) -> web.StreamResponse:
        """``lines`` events with the transcript's new items, ``task`` when its page changed."""
        response = await _open(request)
        seen: object = None
        data = self._data

        async def step() -> bool:
            nonlocal cursor, seen
            items, cursor = await data.transcript(task.id, cursor)
            if items:
                await _send(response, "lines", {"items": items, "cursor": cursor})
            now = await data.own(user_id, task.id)
            if now is None:
                return False
            pending = await data.store.questions.pending_of([task.id])
            mark = (now.status, now.total_cost_usd, tuple(q.id for q in pending), now.updated_at)
            if mark != seen:
                seen = mark
                await _send(response, "task", await data.page(user_id, now))
            return True

        return await self._loop(response, step)

    async def tasks(self, request: web.Request, user_id: int, archived: bool) -> web.StreamResponse:
        """``tasks`` events with the whole list whenever a row of it changed."""
        response = await _open(request)
        seen: object = None

        async def step() -> bool:
            nonlocal seen
            rows = await self._data.tasks(user_id, archived)
            if rows != seen:
                seen = rows
                await _send(response, "tasks", {"tasks": rows})
            return True

        return await self._loop(response, step)

    async def _loop(
        self, response: web.StreamResponse, step: Callable[[], Awaitable[bool]]
    ) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        ends = loop.time() + STREAM_MAX_S
        quiet_since = loop.time()
        try:
            while not self._closing.is_set() and loop.time() < ends:
                if not await step():
                    break
                if loop.time() - quiet_since > KEEPALIVE_S:
                    await response.write(b": keep-alive\n\n")
                    quiet_since = loop.time()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._closing.wait(), POLL_S)
        except (ConnectionResetError, ConnectionError):
            pass  # the page went away
        return response


async def _open(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # a reverse proxy passes each event at once
        }
    )
    await response.prepare(request)
    return response


async def _send(response: web.StreamResponse, event: str, payload: dict[str, Any]) -> None:
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    await response.write(f"event: {event}\ndata: {body}\n\n".encode())
