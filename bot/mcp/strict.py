"""The MCP server of `detach mcp`, refusing a tool call that names an argument its tool does not
take. The SDK's argument model drops such an argument unsaid: ``start`` given ``host`` started a
task that runs wherever the bot places it, its caller none the wiser (a task file, which is
what ``start`` writes, has no host: only a command in the chat pins one)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError


class StrictServer(MCPServer):
    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> Any:
        known = await self._arguments(name)
        unknown = sorted(set(arguments) - known) if known is not None else []
        if unknown and known is not None:
            takes = ", ".join(sorted(known))
            raise ToolError(f"{name} takes no {', '.join(unknown)}; its arguments: {takes}")
        return await super().call_tool(name, arguments, context)

    async def _arguments(self, name: str) -> set[str] | None:
        """The arguments ``name``'s schema names (None: no such tool, the SDK says so)."""
        for tool in await self.list_tools():
            if tool.name == name:
                return set((tool.input_schema or {}).get("properties", {}))
        return None
