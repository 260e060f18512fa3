"""The local engine as an MCP client: the turn's MCP servers (``TurnSpec.mcp_servers``:
`detach mcp --parent`, whose tools start sub-tasks, wait for them and pass messages) started
for the turn, their tools offered to the model as ``<server>__<tool>`` functions beside its own
and called without asking (they are the bot's, each capped by the parent's rights there). A
call is bounded; a tool's refusal reaches the model as an error with the reason."""

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
CALL_TIMEOUT_S = 660.0  # above the longest wait a sub-task tool offers (bot.mcp.desk)
SEPARATOR = "__"


class McpTools:
    """The tools of a turn's MCP servers, as the local model sees and calls them."""

    def __init__(self) -> None:
        self._clients: dict[str, Client] = {}
        self._tools: dict[str, tuple[str, str]] = {}  # function name -> (server, tool)
        self.schemas: list[dict[str, Any]] = []

    def __contains__(self, name: object) -> bool:
        return name in self._tools

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
        text = "\n".join(getattr(c, "text", "") for c in result.content)
        if result.is_error:
            raise ToolFailed(text or f"{name} failed")
        return text


@contextlib.asynccontextmanager
async def mcp_tools(servers: tuple[McpServerSpec, ...]) -> AsyncIterator[McpTools | None]:
    """The servers started (stdio) for the turn and stopped after it; None when there are
    none. A server that does not start is left out (logged): the turn runs without it."""
    if not servers:
        yield None
        return
    from mcp import Client, StdioServerParameters

    tools = McpTools()
    async with contextlib.AsyncExitStack() as stack:
        for server in servers:
            params = StdioServerParameters(
                command=server.command, args=list(server.args), env=dict(server.env)
            )
            try:
                async with asyncio.timeout(START_TIMEOUT_S):  # same task: anyio's scopes
                    client = await stack.enter_async_context(Client(params))
                    await tools.add(client, server.name)
            except Exception as exc:  # deliberate: a server that fails costs its tools only
                log.warning("local: MCP server %s did not start: %s", server.name, exc)
        yield tools
