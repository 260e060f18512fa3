"""The MCP server of `detach mcp` (the official ``mcp`` SDK): the desk's operations as tools
with schemas and descriptions written for a model, over stdio or, with ``--http``, the
streamable HTTP transport behind a bearer token. A tool's bad input or refusal is a tool
error with the reason (``isError``), never the server's end."""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from bot.errors import ConfigError, ToolRefused
from bot.mcp.desk import PAGE_MAX, WAIT_MAX_S, WATCH_MAX_S, McpDesk
from bot.mcp.owner import add_owner_tools, owner_tools_server
from bot.mcp.strict import StrictServer

log = logging.getLogger(__name__)

INSTRUCTIONS = """Detach runs coding-agent tasks (Claude Code, Codex) in the background on this \
machine and reports them to their owner in Telegram. Use it to hand off work that can run on \
its own: `start` a task with a self-contained goal, then `watch` it (pass back the cursor each \
call returns) until `done` is true and read `last_turn.answer`; `followup` continues the same \
agent session with a new request; `cancel` stops it. Approvals of risky actions stay with the \
owner in Telegram; a task waiting for one is `waiting_for_approval`."""

TaskId = Annotated[int, Field(description="The task's number (task_id from start or list).", ge=1)]


def build_server(desk: McpDesk) -> MCPServer:
    server = StrictServer("detach", instructions=INSTRUCTIONS)

    @server.tool(
        structured_output=False,
        description="Start a background task: an agent works on `goal` in its own session "
        "and the owner sees it in Telegram. Returns task_id and label at once; the work "
        "goes on after this call (use watch).",
    )
    async def start(
        goal: Annotated[
            str,
            Field(
                description="What to do, self-contained: the agent sees nothing of this "
                "conversation. Name files and the definition of done.",
                min_length=1,
            ),
        ],
        ctx: Context,
        engine: Annotated[
            str | None, Field(description="claude, codex or local (default: the bot's).")
        ] = None,
        model: Annotated[
            str | None, Field(description="A model or preset name, e.g. sonnet, opus.")
        ] = None,
        cwd: Annotated[
            str | None,
            Field(
                description="Working directory; must be inside the bot's allowed ones (a "
                "sub-task's: inside its parent's)."
            ),
        ] = None,
        worktree: Annotated[
            bool | None,
            Field(description="true: work in a new git worktree of the repository at cwd."),
        ] = None,
        mode: Annotated[
            str | None,
            Field(
                description="sandbox (default: OS sandbox, no questions), ask (the owner "
                "approves risky tools in Telegram), auto, or readonly. A sub-task gets at "
                "most its parent's rights (default: its parent's mode)."
            ),
        ] = None,
        check: Annotated[
            str | None,
            Field(
                description="A shell command that proves the work (e.g. pytest -q); no: none. "
                "Refused for a sub-task: it runs its parent's check."
            ),
        ] = None,
    ) -> str:
        return await _call(
            desk.start,
            goal=goal,
            client=_client(ctx),
            engine=engine,
            model=model,
            cwd=cwd,
            worktree=worktree,
            mode=mode,
            check=check,
        )

    @server.tool(
        structured_output=False,
        description="A task's state: status (queued, running, waiting_for_limit, done, "
        "failed, cancelled…), whether it waits for the owner's approval, its cost, the model "
        "asked for and the model that ran (as its engine named it), and its last turn's "
        "answer or error.",
    )
    async def status(task_id: TaskId) -> str:
        return await _call(desk.status, task_id=task_id)

    @server.tool(
        structured_output=False,
        description="A task's pull request, when its owner opened one from the task's card: "
        "number, url, state (open, merged, closed) and its checks (none, pending, success, "
        "failure); pr is null when there is none. Pushing and opening stay with the owner.",
    )
    async def pr(task_id: TaskId) -> str:
        return await _call(desk.pr, task_id=task_id)

    @server.tool(
        structured_output=False,
        description="Wait for a task's new output after `cursor` and return it as readable "
        "lines (💬 what the agent said, ▸ a tool it called, ↳ the result) with the next cursor. "
        "Returns when there is something new, or with until_done=true when the task has "
        "finished (then last_turn.answer holds its answer), or after timeout_s.",
    )
    async def watch(
        task_id: TaskId,
        cursor: Annotated[
            int, Field(description="0 the first time, then the cursor returned last.", ge=0)
        ] = 0,
        timeout_s: Annotated[
            float,
            Field(description=f"Longest wait in seconds (at most {WATCH_MAX_S:.0f}).", ge=0),
        ] = 30.0,
        until_done: Annotated[
            bool, Field(description="Wait until the task is no longer queued or running.")
        ] = False,
    ) -> str:
        return await _call(
            desk.watch,
            task_id=task_id,
            cursor=cursor,
            timeout_s=min(timeout_s, WATCH_MAX_S),
            until_done=until_done,
        )

    @server.tool(
        structured_output=False,
        description="A page of a task's whole transcript after `cursor` (no waiting); "
        "`more` says whether another page follows.",
    )
    async def output(
        task_id: TaskId,
        cursor: Annotated[int, Field(description="0 for the first page.", ge=0)] = 0,
        limit: Annotated[int, Field(description="Events per page.", ge=1, le=PAGE_MAX)] = 100,
    ) -> str:
        return await _call(desk.output, task_id=task_id, cursor=cursor, limit=limit)

    @server.tool(
        structured_output=False,
        description="Continue a task's agent session with a new request: after its current "
        "turn, if one runs, or with steer=true into that turn (the agent reads it at its next "
        "step). Then watch it with until_done=true.",
    )
    async def followup(
        task_id: TaskId,
        prompt: Annotated[str, Field(description="The request.", min_length=1)],
        ctx: Context,
        steer: Annotated[
            bool | None,
            Field(
                description="While a turn runs: true sends the request into it, false queues "
                "it after it; unset: the owner's default (DETACH_REPLY_DEFAULT)."
            ),
        ] = None,
    ) -> str:
        return await _call(
            desk.followup, task_id=task_id, prompt=prompt, client=_client(ctx), steer=steer
        )

    @server.tool(
        structured_output=False,
        description="Cancel a task: its queued turns are dropped and its running turn stopped.",
    )
    async def cancel(task_id: TaskId, ctx: Context) -> str:
        return await _call(desk.cancel, task_id=task_id, client=_client(ctx))

    @server.tool(
        name="list",
        structured_output=False,
        description="The owner's tasks, newest first, with their status and the model that "
        "ran each: find a task_id or see what still runs.",
    )
    async def list_tasks(
        active_only: Annotated[
            bool, Field(description="Only queued, running or waiting tasks.")
        ] = False,
        limit: Annotated[int, Field(description="How many.", ge=1, le=100)] = 20,
    ) -> str:
        return await _call(desk.list, active_only=active_only, limit=limit)

    add_owner_tools(server, desk, _call)  # notify, ask_owner (bot.mcp.owner)
    _tree_tools(server, desk)
    return server


def build_owner_server(desk: McpDesk) -> MCPServer:
    """`detach mcp --task N`: only the owner tools of that task's agent."""
    return owner_tools_server(desk, _call)


def _tree_tools(server: MCPServer, desk: McpDesk) -> None:
    """The sub-task tree's tools (issue #55): wait for a child, report to the parent,
    message a sibling, read what came."""

    @server.tool(
        structured_output=False,
        description="Wait until a sub-task's turn has ended and return its answer "
        "(last_turn.answer): the simple way to use a child's result. done=false after "
        f"timeout_s (at most {WAIT_MAX_S:.0f}): call wait again.",
    )
    async def wait(
        task_id: TaskId,
        timeout_s: Annotated[
            float,
            Field(description=f"Longest wait in seconds (at most {WAIT_MAX_S:.0f}).", ge=0),
        ] = WAIT_MAX_S,
    ) -> str:
        return await _call(desk.wait, task_id=task_id, timeout_s=min(timeout_s, WAIT_MAX_S))

    @server.tool(
        structured_output=False,
        description="As a sub-task: send a short report (a finding, progress, a question) "
        "to the task that started you; its agent reads it with inbox. Your final answer "
        "reaches it anyway.",
    )
    async def report(
        text: Annotated[str, Field(description="The report, plain text.", min_length=1)],
    ) -> str:
        return await _call(desk.report, text=text)

    @server.tool(
        structured_output=False,
        description="As a sub-task: send a message to a sibling, another sub-task of the "
        "same parent (its task_id); it reads it with inbox. Anyone else is refused.",
    )
    async def message(
        task_id: TaskId,
        text: Annotated[str, Field(description="The message, plain text.", min_length=1)],
    ) -> str:
        return await _call(desk.message, task_id=task_id, text=text)

    @server.tool(
        structured_output=False,
        description="The reports of your sub-tasks and the messages of your siblings that "
        "came after `cursor` (0 the first time, then the cursor returned last).",
    )
    async def inbox(
        cursor: Annotated[int, Field(description="0, then the cursor returned last.", ge=0)] = 0,
    ) -> str:
        return await _call(desk.inbox, cursor=cursor)


async def _call(operation: Callable[..., Awaitable[dict[str, Any]]], **kwargs: Any) -> str:
    """One JSON text block; a refusal, or anything unexpected, as a tool error."""
    try:
        found = await operation(**kwargs)
    except ToolRefused as exc:
        raise ToolError(str(exc)) from None
    except Exception as exc:  # deliberate: one bad call must not end the server
        log.exception("MCP tool %s failed", getattr(operation, "__name__", operation))
        raise ToolError(f"internal error ({type(exc).__name__}); see the bot's log") from None
    return json.dumps(found, ensure_ascii=False, indent=1)


def _client(ctx: Context) -> str:
    """The calling program as it introduced itself (``claude-code 2.1.197``)."""
    try:
        info = ctx.session.client_params.client_info  # type: ignore[union-attr]
        return f"{info.name} {info.version}".strip()
    except AttributeError:
        return "an MCP client"


# -- HTTP ------------------------------------------------------------------------------------
def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def http_token(path: Path, host: str) -> str:
    """The bearer token HTTP clients must send, from ``path`` (the config home's mcp-token).
    Made (0600) on first use for a loopback address; a non-loopback address without one is
    refused: exposing the server beyond this machine must be a deliberate act."""
    if path.exists():
        token = path.read_text().strip()
        if len(token) < 16:
            raise ConfigError(f"{path} holds no usable token (16 characters or more)")
        return token
    if not loopback(host):
        raise ConfigError(
            f"refusing to serve MCP on {host} without a token: put one (16+ characters) in "
            f"{path} first"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    path.touch(mode=0o600)
    path.write_text(token + "\n")
    return token


class BearerGuard:
    """ASGI middleware: every HTTP request must carry ``Authorization: Bearer <token>``."""

    def __init__(self, app: Any, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                body = b'{"error": "a valid bearer token is required"}'
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)


async def serve_http(server: MCPServer, host: str, port: int, token: str) -> None:
    import uvicorn

    app = BearerGuard(server.streamable_http_app(streamable_http_path="/mcp", host=host), token)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()
