"""The local engine as an MCP client: the turn's MCP servers (``TurnSpec.mcp_servers``:
`detach mcp --parent N`, sub-task, tree and owner tools, or `--task N`, the owner tools
``notify`` and ``ask_owner``) started for the turn, their tools offered to the model as
``<server>__<tool>`` functions beside its own and called without asking (they are the bot's:
sub-tasks capped by the parent's rights, notes and questions to the owner). A call is bounded;
a tool's refusal reaches the model as an error with the reason.

A task of its own holds the servers (the SDK's task groups), so neither the turn's errors nor
its cancellation pass through theirs (else a model's error surfaced as an ExceptionGroup). A
server that does not start costs the turn its tools, not the turn."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from bot.models import McpServerSpec
from executors.local_files import ToolFailed

if TYPE_CHECKING:
    from mcp import Client

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0  # `detach mcp` is a Python process: slow to start on a busy machine
STOP_TIMEOUT_S = 5.0  # the servers' stdin closed, they exit; then they are cancelled
CALL_TIMEOUT_S = 100_000.0  # as Codex's (codex_mcp.py): above `wait` and `ask_owner`
SEPARATOR = "__"


class McpTools:
    """The tools of a turn's MCP servers, as the local model sees and calls them."""

    def __init__(self) -> None:
        self._clients: dict[str, Client] = {}
        self._tools: dict[str, tuple[str, str]] = {}  # function name -> (server, tool)
        self.schemas: list[dict[str, Any]] = []

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> frozenset[str]:
        """The functions' names (the model is told them when it calls one that is not)."""
        return frozenset(self._tools)

    async def add(self, client: Client, server: str) -> None:
        """``client``'s tools, listed once for the turn."""
        self._clients[server] = client
        listed = await client.list_tools()
        for tool in listed.tools:
            name = f"{server}{SEPARATOR}{tool.name}"
            self._tools[name] = (server, tool.name)
            schema = dict(tool.input_schema or {"type": "object", "properties": {}})
            self.schemas.append(
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": tool.description or "",
                        "parameters": schema,
                    },
                }
            )

    async def call(self, name: str, raw: str) -> str:
        """The tool's answer as text; ToolFailed with the reason (a refusal, bad arguments)."""
        server, tool = self._tools[name]
        try:
            args = json.loads(raw or "{}")
        except (ValueError, RecursionError) as exc:
            raise ToolFailed(f"the arguments of {name} are not valid JSON") from exc
        if not isinstance(args, dict):
            raise ToolFailed(f"the arguments of {name} must be a JSON object")
        try:
            async with asyncio.timeout(CALL_TIMEOUT_S):
                result = await self._clients[server].call_tool(tool, args)
        except TimeoutError as exc:
            raise ToolFailed(f"{name} gave no answer in {CALL_TIMEOUT_S:.0f} s") from exc
        text = "\n".join(getattr(c, "text", "") for c in result.content or [])
        if result.is_error:
            raise ToolFailed(text or f"{name} failed")
        return text


@contextlib.asynccontextmanager
async def mcp_tools(servers: tuple[McpServerSpec, ...]) -> AsyncIterator[McpTools]:
    """The servers started (stdio) for the turn, their tools listed, and stopped after it
    (none: no tools, nothing started)."""
    tools = McpTools()
    if not servers:
        yield tools
        return
    ready, stop = asyncio.Event(), asyncio.Event()
    holder = asyncio.create_task(_hold(servers, tools, ready, stop), name="local-mcp")
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(ready.wait()), START_TIMEOUT_S * len(servers))
        yield tools
    finally:
        stop.set()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(holder), STOP_TIMEOUT_S)
        holder.cancel()


async def _hold(
    servers: tuple[McpServerSpec, ...], tools: McpTools, ready: asyncio.Event, stop: asyncio.Event
) -> None:
    """Start the servers, list their tools, and keep them until ``stop``."""
    from mcp import Client, StdioServerParameters

    try:
        async with contextlib.AsyncExitStack() as stack:
            for server in servers:
                params = StdioServerParameters(
                    command=server.command, args=list(server.args), env=dict(server.env)
                )
                try:
                    async with asyncio.timeout(START_TIMEOUT_S):  # same task: anyio's scopes
                        client = await stack.enter_async_context(Client(params))
                        await tools.add(client, server.name)
                except Exception as exc:  # deliberate: a server that fails costs its tools
                    log.warning("local: MCP server %s did not start: %r", server.name, exc)
            ready.set()
            await stop.wait()
    finally:
        ready.set()
