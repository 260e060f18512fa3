"""The bot's side of ``codex app-server``'s JSON-RPC over stdio: requests matched to their
replies (bounded), everything else (notifications, the server's own requests) in arrival order,
and the tasks that answer the server's requests."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from bot.errors import AgentCrashed
from executors.json_lines import JsonLines
from executors.process import read_lines

log = logging.getLogger(__name__)
RPC_TIMEOUT_S = 60.0


class Rpc:
    """JSON-RPC over the app-server's stdio: one JSON object per line, no "jsonrpc" field."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._next_id = 1000
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._inbox: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._lines = JsonLines(proc)
        self._tasks: set[asyncio.Task[None]] = set()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self._proc.stdout is not None
        try:
            async for line in read_lines(self._proc.stdout, self._proc):
                self._route(line)
        except AgentCrashed as exc:  # a line over the limit: the turn ends without a verdict
            log.warning("codex pid %s: %s", self._proc.pid, exc.reason)
        self._inbox.put_nowait(None)
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(AgentCrashed("codex app-server exited", None, ""))

    def _route(self, line: str) -> None:
        """A reply to its waiting request, anything else to the inbox; what is not a JSON
        object is skipped."""
        try:
            message = json.loads(line)
        except json.JSONDecodeError:
            return
        if not isinstance(message, dict):
            return
        key = message.get("id")
        future = (
            self._waiting.pop(key, None)
            if isinstance(key, int) and ("result" in message or "error" in message)
            else None
        )
        if future is not None and not future.done():
            future.set_result(message)
        elif future is None:
            self._inbox.put_nowait(message)

    async def send(self, message: dict[str, Any]) -> None:
        await self._lines.write(message)

    async def notify(self, method: str) -> None:
        await self.send({"method": method})

    async def request(
        self, method: str, params: dict[str, Any], timeout_s: float = RPC_TIMEOUT_S
    ) -> dict[str, Any]:
        self._next_id += 1
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[self._next_id] = future
        await self.send({"id": self._next_id, "method": method, "params": params})
        reply = await asyncio.wait_for(future, timeout_s)
        if "error" in reply:
            raise AgentCrashed(f"codex {method}: {reply['error'].get('message')}", None, "")
        return dict(reply.get("result") or {})

    async def incoming(self) -> AsyncIterator[dict[str, Any]]:
        while (message := await self._inbox.get()) is not None:
            yield message

    async def watch_until(self, seen: Callable[[dict[str, Any]], bool], timeout_s: float) -> bool:
        """Show incoming messages to ``seen`` until it says enough (True) or ``timeout_s``
        passes (False); every message stays in the inbox, in order, for ``incoming``."""
        kept: list[dict[str, Any] | None] = []
        enough = False
        try:
            async with asyncio.timeout(timeout_s):
                while not enough:
                    message = await self._inbox.get()
                    kept.append(message)
                    enough = message is None or seen(message)
        except TimeoutError:
            pass
        while not self._inbox.empty():
            kept.append(self._inbox.get_nowait())
        for message in kept:
            self._inbox.put_nowait(message)
        return enough

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        self._lines.close()

    async def aclose(self) -> None:
        for task in [*self._tasks, self._reader]:
            task.cancel()
        await asyncio.gather(*self._tasks, self._reader, return_exceptions=True)
        self.close()
