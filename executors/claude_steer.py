"""Steering a Claude Code turn (measured with 2.1.197: ``docs/steer-measured.md`` of the lab).

A ``user`` line written to the CLI's open stdin is folded into the running turn at its next
tool-call boundary (the model's request after a tool result carries it), and never into a turn
that calls no tool more: then the CLI runs it as a next turn of its own after the ``result``.
``--replay-user-messages`` echoes each line (``isReplay``) the moment the CLI uses it.

So a steer is written only while a tool call of the turn is outstanding (its ``tool_use``
seen, its result not yet; an approval the owner is asked is such a call): the boundary after
it is then ahead, and the echo before the ``result`` says it was taken in. A steer that finds
no outstanding call before the ``result`` is never written: the turn ended first, and the bot
runs it as its own next turn. One written but not echoed by the ``result`` (the tool finished
just before the write) is deferred too; the process is stopped at once after the result, as
every turn's is."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from bot.events import AgentEvent, Steer, SteerDeferred, SteerTaken, ToolCalled, ToolFinished
from bot.ports import SteerInbox
from executors.json_lines import JsonLines

log = logging.getLogger(__name__)


def user_line(text: str) -> dict[str, Any]:
    """A user message for the CLI's stream-json stdin."""
    return {
        "type": "user",
        "parent_tool_use_id": None,
        "session_id": "",
        "message": {"role": "user", "content": text},
    }


def replayed_text(data: dict[str, Any]) -> str | None:
    """The text of a ``user`` line the CLI echoed back (``isReplay``), else None."""
    if data.get("type") != "user" or data.get("isReplay") is not True:
        return None
    message = data.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        blocks = [b for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "".join(str(b.get("text", "")) for b in blocks)
    return None


class ClaudeSteering:
    """Writes a turn's steers to the CLI at its tool-call boundaries and tells, from the
    CLI's echoes, what became of each."""

    def __init__(self, inbox: SteerInbox, lines: JsonLines) -> None:
        self._inbox = inbox
        self._lines = lines
        self._open_calls: set[str] = set()
        self._boundary = asyncio.Event()  # a tool call is outstanding
        self._written: list[Steer] = []  # written, not echoed yet
        self._writer = asyncio.create_task(self._write(), name="claude steer")

    def observe(self, event: AgentEvent) -> None:
        if isinstance(event, ToolCalled):
            self._open_calls.add(event.tool_use_id)
        elif isinstance(event, ToolFinished):
            self._open_calls.discard(event.tool_use_id)
        if self._open_calls:
            self._boundary.set()
        else:
            self._boundary.clear()

    def replayed(self, text: str) -> list[AgentEvent]:
        """The CLI echoed a line: a steer's echo before the result means it is in the turn."""
        for steer in self._written:
            if steer.text == text:
                self._written.remove(steer)
                return [SteerTaken(steer.steer_id)]
        return []  # the prompt's own echo

    async def finished(self) -> list[AgentEvent]:
        """The turn's result came: what was not taken in runs as its own next turn."""
        await self.aclose()
        left = [*self._written, *self._inbox.take()]
        self._written = []
        return [SteerDeferred(s.steer_id) for s in left]

    async def _write(self) -> None:
        while True:
            await self._inbox.arrived()
            await self._boundary.wait()
            for steer in self._inbox.take():
                self._written.append(steer)
                await self._lines.write(user_line(steer.text))
                log.info("claude: steer %s written at a tool-call boundary", steer.steer_id)

    async def aclose(self) -> None:
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._writer
