"""The owner tools of a task's agent on its MCP server: ``notify`` (a short note to the owner's
chat) and ``ask_owner`` (a question with up to four answers that waits for a tap). Every Claude
and Codex task gets them (`detach mcp --task N`); a ``subtasks=yes`` task gets them beside its
sub-task tools (`--parent N`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from bot.mcp.desk import McpDesk
from bot.mcp.strict import StrictServer

Call = Callable[..., Awaitable[str]]  # ``server._call``: a desk operation as one JSON text
INSTRUCTIONS = """Detach runs this task for its owner, who reads its messages in Telegram. \
`notify` tells them something now; `ask_owner` asks them one question and waits for the answer."""


def add_owner_tools(server: MCPServer, desk: McpDesk, call: Call) -> None:
    """``notify`` and ``ask_owner`` on ``server``, each through ``call``."""

    @server.tool(
        structured_output=False,
        description="Tell your owner something now, in one short note in your task's "
        "Telegram thread (at most 500 characters): a finding, a decision you took, that "
        "you are blocked. Silent unless urgent=true (then the phone buzzes; use it only "
        "for what needs the owner soon). Rate-limited; a refusal says why. Only for the "
        "agent of a task; your final answer reaches the owner anyway.",
    )
    async def notify(
        text: Annotated[
            str, Field(description="The note, plain text, one or two sentences.", min_length=1)
        ],
        urgent: Annotated[
            bool, Field(description="true: the owner's phone buzzes (sparingly).")
        ] = False,
    ) -> str:
        return await call(desk.notify, text=text, urgent=urgent)

    @server.tool(
        structured_output=False,
        description="Ask your owner one question they answer with a tap on one of 1 to 4 "
        "short answers; the call waits until they tap (their phone buzzes) or until the "
        "bot's wait ends, then returns answered=true and the answer, or answered=false: "
        "use your own judgement and say in your final answer what you chose. Only when a "
        "wrong guess would waste the work; never for what you can find out yourself.",
    )
    async def ask_owner(
        question: Annotated[
            str, Field(description="The question, plain text, self-contained.", min_length=1)
        ],
        answers: Annotated[
            list[str],
            Field(description="1 to 4 short answers (buttons), all different.", max_length=4),
        ],
    ) -> str:
        return await call(desk.ask_owner, question=question, answers=answers)


def owner_tools_server(desk: McpDesk, call: Call) -> MCPServer:
    """The server of `detach mcp --task N`: the owner tools alone."""
    server = StrictServer("detach", instructions=INSTRUCTIONS)
    add_owner_tools(server, desk, call)
    return server
