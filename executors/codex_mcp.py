"""A turn's MCP servers (``TurnSpec.mcp_servers``: `detach mcp --parent` or `--task`) as Codex
takes them: ``-c mcp_servers.<name>.…`` overrides of its configuration, one TOML value each (no
secret in them: ``bot.mcp.launch``). The server's tools need no approval (they are the bot's
own: sub-tasks capped by the parent's rights, notes and questions to the owner), and a tool may
take as long as a person takes to answer ``ask_owner`` (the server bounds that wait itself,
DETACH_PREFLIGHT_WAIT_S) or the longest ``wait``; Codex's default is 60 s.

Codex 0.171 starts a thread's servers in the background and offers their tools behind its
``tool_search``: a turn started before they are ready finds none, so the turn waits, bounded,
until each says it is ready or failed (``mcpServer/startupStatus/updated``)."""

from __future__ import annotations

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
TOOL_TIMEOUT_S = 100_000  # Claude Code's default (1e8 ms): above `wait` and `ask_owner`


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
            # else Codex asks through an elicitation the bot does not answer: a refusal
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
    learns of them. Every message stays for the turn, in order."""
    waiting = set(names)

    def settled(message: dict[str, Any]) -> bool:
        params = message.get("params")
        if message.get("method") != STARTUP_STATUS or not isinstance(params, dict):
            return not waiting
        name, status = str(params.get("name")), params.get("status")
        if status in SETTLED:
            if status != "ready":
                log.warning("codex: MCP server %s: %.300s", name, params.get("error"))
            waiting.discard(name)
        return not waiting

    if waiting and not await rpc.watch_until(settled, timeout_s):
        log.warning("codex: MCP servers %s not ready after %.0f s", sorted(waiting), timeout_s)
