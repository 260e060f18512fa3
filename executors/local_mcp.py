"""The local engine as a client of the turn's MCP servers (``TurnSpec.mcp_servers``: `detach
mcp --task N`, the owner tools ``notify`` and ``ask_owner``), so /local's agent reaches its
owner through the same server and use cases as Claude's and Codex's.

Each server is started for the turn (stdio, the official ``mcp`` SDK) and its tools are offered
to the model as functions named as the server names them; a call is passed on and its text
returned. A server that does not start costs the turn its tools, not the turn."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from bot.models import McpServerSpec, TurnSpec
from executors.local_files import ToolFailed

log = logging.getLogger(__name__)

START_S = 60.0  # `detach mcp` imports for seconds on a loaded machine
STOP_S = 5.0  # the servers' stdin closed, they exit; then they are cancelled


class McpTools:
    """The tools of the turn's MCP servers: their schemas for the model, and their calls."""

    def __init__(self) -> None:
        self.schemas: list[dict[str, Any]] = []
        self._sessions: dict[str, Any] = {}  # tool name -> the ClientSession serving it

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self._sessions)

    def add(self, session: Any, tools: list[Any]) -> None:
        for tool in tools:
            if tool.name in self._sessions:
                continue
            parameters = dict(tool.input_schema or {"type": "object", "properties": {}})
            self._sessions[tool.name] = session
            self.schemas.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description or "",
                        "parameters": parameters,
                    },
                }
            )

    async def call(self, name: str, args: dict[str, Any]) -> str:
        """The tool's text; ToolFailed with the server's reason when it refused."""
        result = await self._sessions[name].call_tool(name, args)
        text = "\n".join(getattr(c, "text", "") for c in result.content or [])
        if result.is_error:
            raise ToolFailed(text or f"{name} failed")
        return text


@contextlib.asynccontextmanager
async def mcp_tools(spec: TurnSpec) -> AsyncIterator[McpTools]:
    """The turn's servers started and their tools listed (none: no tools, nothing started).
    A task of its own holds them (the SDK's task groups), so neither the turn's errors nor
    its cancellation pass through theirs."""
    found = McpTools()
    if not spec.mcp_servers:
        yield found
        return
    ready, stop = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_hold(spec, found, ready, stop), name="local-mcp")
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(ready.wait()), START_S * 2)
        yield found
    finally:
        stop.set()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(holder), STOP_S)
        holder.cancel()


async def _hold(spec: TurnSpec, found: McpTools, ready: asyncio.Event, stop: asyncio.Event) -> None:
    """Start the servers, list their tools, and keep them until ``stop``."""
    try:
        async with contextlib.AsyncExitStack() as stack:
            for server in spec.mcp_servers:
                try:
                    session = await _started(stack, server)
                    found.add(session, list((await session.list_tools()).tools))
                except Exception as exc:  # deliberate: a server that fails costs its tools
                    log.warning("local: MCP server %s did not start: %r", server.name, exc)
            ready.set()
            await stop.wait()
    finally:
        ready.set()


async def _started(stack: contextlib.AsyncExitStack, server: McpServerSpec) -> Any:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=server.command, args=list(server.args), env=dict(server.env)
    )
    read, write = await stack.enter_async_context(stdio_client(params))
    session = await stack.enter_async_context(ClientSession(read, write))
    await asyncio.wait_for(session.initialize(), START_S)
    return session
