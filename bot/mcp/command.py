"""`detach mcp` put together from the settings: whose tasks (the place), where it listens,
and the server run on the bot's database."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bot import config
from bot.errors import ConfigError
from bot.mcp.desk import McpDesk, McpPlace
from bot.mcp.server import build_owner_server, build_server, http_token, serve_http
from bot.models import Phrase
from bot.settings import Settings
from bot.tasks.clients import ClientTasks
from executors import registry

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

# awaited before a stdio server reads its input: set only in a fork the MCP zygote made ahead
# of its agent (bot.zygote), which gets its relay's descriptors there
stdio_taken: Callable[[], Awaitable[None]] | None = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    host: str
    port: int
    token: str


def plan(settings: Settings, http: str | None) -> tuple[McpPlace, Endpoint | None]:
    """The place and the HTTP endpoint (None: stdio); bad settings fail here, before any
    database is opened."""
    owner, chat_id = owner_of(settings)
    endpoint = None
    if http:
        host, _, port = http.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(Phrase("shell.mcp_bad_http", {"given": repr(http)}))
        token = http_token(config.config_home(os.environ) / "mcp-token", host)
        endpoint = Endpoint(host, int(port), token)
    place = McpPlace(
        data_dir=settings.data_dir,
        owner=owner,
        chat_id=chat_id,
        engines=registry.names(),
        max_prompt_chars=settings.max_prompt_chars,
        alive_file=settings.data_dir / config.ALIVE_FILE,
        max_subtasks=settings.max_subtasks,
        reply_default=settings.reply_default,
        timezone=settings.timezone,
    )
    return place, endpoint


async def serve(
    tasks: ClientTasks,
    place: McpPlace,
    endpoint: Endpoint | None,
    parent_id: int | None,
    task_id: int | None = None,
) -> None:
    """Serve until the client goes (stdio) or the process is stopped (HTTP); under
    ``parent_id`` (`--parent`) the owner and chat are that task's; under ``task_id``
    (`--task`) only that task's owner tools are served."""
    if task_id is not None:
        tasks = await tasks.for_task(task_id)
        assert tasks.parent is not None
        task = tasks.parent
        place = dataclasses.replace(place, owner=task.owner_id, chat_id=task.chat_id, parent=task)
        server = build_owner_server(McpDesk(tasks, place))
        await _stdio(server)
        return
    if parent_id is not None:
        tasks = await tasks.scoped_to(parent_id)
        parent = tasks.parent
        assert parent is not None
        place = dataclasses.replace(
            place, owner=parent.owner_id, chat_id=parent.chat_id, parent=parent
        )
    server = build_server(McpDesk(tasks, place))
    if endpoint is None:
        await _stdio(server)
        return
    print(f"detach mcp: serving http://{endpoint.host}:{endpoint.port}/mcp", file=sys.stderr)
    await serve_http(server, endpoint.host, endpoint.port, endpoint.token)


async def _stdio(server: MCPServer) -> None:
    if stdio_taken is not None:
        await stdio_taken()
    await server.run_stdio_async()


def owner_of(settings: Settings) -> tuple[int, int]:
    """Whose tasks `detach mcp` starts, and the chat they report to: DETACH_MCP_CHAT (an
    allowed user, or a group whose tasks belong to the first allowed user), else the first
    allowed user."""
    if not settings.allowed_users:
        raise ConfigError(Phrase("shell.no_users_report"))
    first = min(settings.allowed_users)
    chat = settings.mcp_chat
    if chat is None:
        return first, first
    if chat < 0:
        return first, chat
    if chat not in settings.allowed_users:
        raise ConfigError(Phrase("shell.mcp_chat_not_allowed", {"chat": chat}))
    return chat, chat
