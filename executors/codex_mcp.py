"""A turn's MCP servers (``TurnSpec.mcp_servers``: `detach mcp --parent`) as Codex takes them:
``-c mcp_servers.<name>.…`` overrides of its configuration, one TOML value each. The server's
tools need no approval (they are the bot's own, each capped by the parent's rights), and a
tool may take as long as the longest ``wait`` (Codex's default is 60 s)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any

from bot.models import McpServerSpec
from executors.codex_rpc import Rpc

log = logging.getLogger(__name__)
STARTUP_STATUS = "mcpServer/startupStatus/updated"
SETTLED = frozenset({"ready", "failed", "cancelled"})

STARTUP_TIMEOUT_S = 60  # `detach mcp` is a Python process: slow to start on a busy machine
TOOL_TIMEOUT_S = 660  # above the longest wait a sub-task tool offers (bot.mcp.desk)


def mcp_config(servers: tuple[McpServerSpec, ...]) -> list[str]:
    """The ``-c`` arguments that give the agent ``servers`` (none: no argument)."""
    argv: list[str] = []
    for server in servers:
        key = f"mcp_servers.{server.name}"
        values = {
            "command": json.dumps(server.command),
            "args": json.dumps(list(server.args)),
            "env": _table(server.env),
            "startup_timeout_sec": str(STARTUP_TIMEOUT_S),
            "tool_timeout_sec": str(TOOL_TIMEOUT_S),
            "default_tools_approval_mode": '"approve"',
        }
        for name, value in values.items():
            argv += ["-c", f"{key}.{name}={value}"]
    return argv


def _table(env: Mapping[str, str]) -> str:
    """A TOML inline table of strings (JSON strings are TOML basic strings)."""
    return "{" + ", ".join(f"{json.dumps(k)} = {json.dumps(v)}" for k, v in env.items()) + "}"


async def servers_settled(rpc: Rpc, names: set[str], timeout_s: float = STARTUP_TIMEOUT_S) -> None:
    """Wait (bounded) until each of ``names`` is ready or failed: the app-server starts a
    turn without waiting for them, and a model that saw no tool in its first request never
    learns of them. What else came meanwhile stays for the turn, in order."""
    waiting, kept = set(names), []
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            async for message in rpc.incoming():
                if not _settles(message, waiting):
                    kept.append(message)
                if not waiting:
                    break
    if waiting:
        log.warning("codex: MCP servers %s not ready after %.0f s", sorted(waiting), timeout_s)
    rpc.unread(kept)


def _settles(message: dict[str, Any], waiting: set[str]) -> bool:
    """Whether ``message`` says a server settled (then no longer waited for)."""
    params = message.get("params")
    if message.get("method") != STARTUP_STATUS or not isinstance(params, dict):
        return False
    if params.get("status") in SETTLED:
        if params.get("status") != "ready":
            log.warning("codex: MCP server %s: %.300s", params.get("name"), params.get("error"))
        waiting.discard(str(params.get("name")))
    return True
