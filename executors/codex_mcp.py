"""A turn's MCP servers (``TurnSpec.mcp_servers``: `detach mcp` with the owner tools) as Codex
config overrides (``-c mcp_servers.<name>.…``): its command, arguments and environment (no
secret: ``bot.mcp.launch``), and a tool timeout as long as Claude's, since ``ask_owner`` waits
for a person and the server bounds that wait itself (DETACH_PREFLIGHT_WAIT_S).

Codex 0.171 starts a thread's servers in the background and offers their tools behind its
``tool_search`` (deferred): a turn started before they are ready finds none, so the turn
waits, bounded, until each says it is ready or failed (``mcpServer/startupStatus/updated``),
as Claude Code waits for its servers."""

from __future__ import annotations

import json
import logging
from typing import Any

from bot.models import TurnSpec
from executors.codex_rpc import Rpc

log = logging.getLogger(__name__)

TOOL_TIMEOUT_S = 100_000  # Claude Code's default (1e8 ms); Codex's own is 60 s
STARTUP_TIMEOUT_S = 60  # `detach mcp` imports for seconds on a loaded machine
READY_WAIT_S = 30.0  # the longest a turn waits for its servers before it starts anyway
SETTLED = ("ready", "failed", "cancelled")


def mcp_overrides(spec: TurnSpec) -> list[str]:
    """``-c`` arguments naming each of the turn's MCP servers (none: nothing)."""
    if not spec.mcp_servers:
        return []
    argv = []
    for server in spec.mcp_servers:
        key = f"mcp_servers.{server.name}"
        env = ",".join(f"{json.dumps(k)}={json.dumps(v)}" for k, v in server.env.items())
        for item in (
            f"{key}.command={json.dumps(server.command)}",
            f"{key}.args={json.dumps(list(server.args))}",
            f"{key}.env={{{env}}}",
            f"{key}.startup_timeout_sec={STARTUP_TIMEOUT_S}",
            f"{key}.tool_timeout_sec={TOOL_TIMEOUT_S}",
            # its tools only talk to the owner (as Claude's allowed ``mcp__detach__*``); Codex
            # otherwise asks, through an elicitation the bot does not answer: a refusal
            f'{key}.default_tools_approval_mode="approve"',
        ):
            argv += ["-c", item]
    return argv


async def servers_ready(rpc: Rpc, spec: TurnSpec, timeout_s: float = READY_WAIT_S) -> None:
    """Until each of the turn's MCP servers is ready or failed (at most ``timeout_s``)."""
    waiting = {server.name for server in spec.mcp_servers}

    def seen(message: dict[str, Any]) -> bool:
        params = message.get("params")
        status = message.get("method") == "mcpServer/startupStatus/updated"
        if status and isinstance(params, dict) and params.get("status") in SETTLED:
            waiting.discard(str(params.get("name")))
        return not waiting

    if waiting and not await rpc.watch_until(seen, timeout_s):
        log.warning("codex: MCP servers %s not ready after %.0f s", sorted(waiting), timeout_s)
