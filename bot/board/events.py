"""Live updates: server-sent events, driven by one poll of the store for every open page.

The bot appends a turn's events to the transcript table (``bot.turns.transcribe``: at most
0.3 s after an event) and a scale-out worker writes the same table from another process, so no
in-process hook sees every change; the board polls instead, but once for all pages: ``Pulse``
reads one cheap mark of the store (``TaskReads.mark``: the newest transcript line, task change and
question) every ``POLL_S``, and only when it moved do the open streams read what they show. What
several streams ask in the same generation (the same task's new lines from the same cursor, the
same user's list) is read once and shared. An update reaches a page within ``POLL_S`` plus the
transcript's flush; fifty idle pages cost one query per ``POLL_S``.

A stream ends when its client goes, after ``STREAM_MAX_S`` (the page's reader reconnects with
its cursor) or when the board closes; a user holds at most the ``StreamQuota``'s streams (one
more answers 429)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, TypeVar

from aiohttp import web

from bot.board.limits import StreamQuota
from bot.board.views import BoardData
from bot.tasks.reads import TaskReads

log = logging.getLogger(__name__)
POLL_S = 0.3
KEEPALIVE_S = 15.0
STREAM_MAX_S = 1800.0
T = TypeVar("T")


class Pulse:
    """A generation number that moves when the store's mark does; ``run`` polls it."""

    def __init__(self, reads: TaskReads, closing: asyncio.Event) -> None:
        self._reads = reads
        self._closing = closing
        self.generation = 0
        self._moved = asyncio.Event()
        self._memo: dict[Hashable, asyncio.Future[Any]] = {}

    async def run(self) -> None:
        seen: object = None
        while not self._closing.is_set():
            mark: object
            try:
                mark = await self._reads.mark()
            except Exception:  # deliberate: a failed read is tried again, the pages wait
                log.exception("reading the board's pulse failed")
                mark = seen
            if mark != seen:
                seen = mark
                self.generation += 1
                self._memo = {}
                moved, self._moved = self._moved, asyncio.Event()
                moved.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closing.wait(), POLL_S)
        self._moved.set()

    async def after(self, generation: int, timeout_s: float) -> int:
        """The generation once it differs from ``generation``, or after ``timeout_s``."""
        if self.generation == generation and not self._closing.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), timeout_s)
        return self.generation

    async def shared(self, key: Hashable, read: Callable[[], Awaitable[T]]) -> T:
        """``read()``'s result, read once per generation for every stream asking by ``key``."""
        found = self._memo.get(key)
        if found is None:
            found = self._memo[key] = asyncio.ensure_future(read())
        result: T = await asyncio.shield(found)
        return result


class Streams:
    def __init__(
        self, data: BoardData, pulse: Pulse, closing: asyncio.Event, quota: StreamQuota
    ) -> None:
        self._data = data
        self._pulse = pulse
        self._closing = closing
        self._quota = quota

    async def task(
        self, request: web.Request, user_id: int, task_id: int, cursor: int
    ) -> web.StreamResponse:
        """``lines`` events with the transcript's new items, ``task`` when its page changed."""
        response = _response()
        sent: object = None
        data, pulse = self._data, self._pulse

        async def step() -> bool:
            nonlocal cursor, sent
            while True:  # a long transcript comes in pages, all at once
                start = cursor
                items, cursor = await pulse.shared(
                    ("lines", user_id, task_id, start),
                    functools.partial(data.transcript, user_id, task_id, start),
                )
                if items:
                    await _send(response, "lines", {"items": items, "cursor": cursor})
                if cursor == start:
                    break
            page = await pulse.shared(
                ("page", user_id, task_id), functools.partial(data.page_of, user_id, task_id)
            )
            if page is None:
                return False
            if page != sent:
                sent = page
                await _send(response, "task", page)
            return True

        return await self._loop(request, user_id, response, step)

    async def tasks(self, request: web.Request, user_id: int, archived: bool) -> web.StreamResponse:
        """``tasks`` events with the whole list whenever a row of it changed."""
        response = _response()
        sent: object = None

        async def step() -> bool:
            nonlocal sent
            rows = await self._pulse.shared(
                ("tasks", user_id, archived), lambda: self._data.tasks(user_id, archived)
            )
            if rows != sent:
                sent = rows
                await _send(response, "tasks", {"tasks": rows})
            return True

        return await self._loop(request, user_id, response, step)

    async def _loop(
        self,
        request: web.Request,
        user_id: int,
        response: web.StreamResponse,
        step: Callable[[], Awaitable[bool]],
    ) -> web.StreamResponse:
        transport = request.transport
        if transport is None or not self._quota.take(user_id, transport):
            return web.json_response({"error": "too_many_streams"}, status=429)
        try:
            return await self._run(request, response, step)
        finally:
            self._quota.give(user_id, transport)

    async def _run(
        self,
        request: web.Request,
        response: web.StreamResponse,
        step: Callable[[], Awaitable[bool]],
    ) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        ends = loop.time() + STREAM_MAX_S
        generation = -1
        try:
            await response.prepare(request)
            while not self._closing.is_set() and loop.time() < ends:
                now = await self._pulse.after(generation, KEEPALIVE_S)
                if now == generation:
                    await response.write(b": keep-alive\n\n")
                    continue
                generation = now
                if not await step():
                    break
        except ConnectionError:
            pass  # the page went away
        return response


def _response() -> web.StreamResponse:
    return web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # a reverse proxy passes each event at once
        }
    )


async def _send(response: web.StreamResponse, event: str, payload: dict[str, Any]) -> None:
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    await response.write(f"event: {event}\ndata: {body}\n\n".encode())
