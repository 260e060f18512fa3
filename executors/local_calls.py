"""The local engine's tool calls within one turn: each call of a model's reply parsed, checked
against the task's mode and the owner's rules (asking the approval desk when neither decides),
run, and its result appended to the conversation. A second malformed call fails the turn."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any

from bot.errors import AgentCrashed
from bot.events import (
    AgentEvent,
    ApprovalRequest,
    ToolCalled,
    ToolFinished,
    Usage,
    detail_of,
)
from bot.models import ApprovalMode, Phrase, TurnSpec
from bot.ports import Approver
from executors.local_history import tool_result
from executors.local_mcp import McpTools
from executors.local_pieces import Reply
from executors.local_tools import (
    WRITES,
    Call,
    ToolBox,
    ToolFailed,
    allowed,
    capped,
    parse_call,
)


@dataclass(slots=True)
class TurnState:
    """What one turn keeps between its steps."""

    usage: Usage = field(default_factory=Usage)
    malformed: int = 0  # tool calls with unusable arguments (the second fails the turn)
    denials: list[str] = field(default_factory=list)
    remembered: list[str] = field(default_factory=list)  # rules the owner allowed "always"


@dataclass(frozen=True, slots=True)
class CallContext:
    """What every tool call of one turn is run with: the turn, who approves, the tools."""

    spec: TurnSpec
    approver: Approver
    tools: ToolBox
    mcp: McpTools = field(default_factory=McpTools)  # `detach mcp`'s (local_mcp.py)


async def run_calls(
    reply: Reply, ctx: CallContext, turn: TurnState, messages: list[dict[str, Any]]
) -> AsyncGenerator[AgentEvent, None]:
    """The reply's tool calls, one after another; a call refused before it was parsed (its
    arguments passed the cap) is told to the model instead."""
    for raw in reply.calls:
        if raw["id"] in reply.refused:
            messages.append(tool_result(raw["id"], f"error: {reply.refused[raw['id']]}"))
            continue
        async for event in _tool(raw, ctx, turn, messages):
            yield event


async def _tool(
    raw: dict[str, Any], ctx: CallContext, turn: TurnState, messages: list[dict[str, Any]]
) -> AsyncGenerator[AgentEvent, None]:
    """One tool call of the model: checked, approved, run; its result appended."""
    function = raw["function"]
    if function["name"] in ctx.mcp:
        async for event in _mcp_tool(raw["id"], function, ctx.mcp, messages):
            yield event
        return
    try:
        call = parse_call(raw["id"], function["name"], function["arguments"], ctx.mcp.names)
    except ToolFailed as exc:
        turn.malformed += 1
        if turn.malformed > 1:
            raise AgentCrashed(
                f"the model sent malformed tool arguments again: {exc}",
                None,
                "",
                Phrase("agent.malformed_tool_arguments", {"error": str(exc)}),
            ) from exc
        messages.append(tool_result(raw["id"], f"error: {exc}. Call the tool again."))
        return
    yield ToolCalled(call.id, call.name, call.summary(), detail=detail_of(call.args))
    try:
        denial = await _permit(call, ctx, turn)
        if denial is not None:
            turn.denials.append(call.summary())
            output, failed = denial, True
        else:
            output, failed = await ctx.tools.run(call), False
    except ToolFailed as exc:
        output, failed = f"error: {exc}", True
    yield ToolFinished(call.id, failed, output[:2000])
    messages.append(tool_result(call.id, output))


async def _mcp_tool(
    call_id: str, function: dict[str, Any], mcp: McpTools, messages: list[dict[str, Any]]
) -> AsyncGenerator[AgentEvent, None]:
    """A tool of the turn's MCP servers: the bot's own, run without asking."""
    name, raw = str(function["name"]), str(function.get("arguments") or "")
    yield ToolCalled(call_id, name, name, detail=raw[:2000])
    try:
        output, failed = capped(await mcp.call(name, raw)), False
    except ToolFailed as exc:
        output, failed = f"error: {exc}", True
    yield ToolFinished(call_id, failed, output[:2000])
    messages.append(tool_result(call_id, output))


async def _permit(call: Call, ctx: CallContext, turn: TurnState) -> str | None:
    """None when the call may run; else what the model is told instead."""
    spec = ctx.spec
    if call.name not in WRITES and call.name != "run":
        return None
    if spec.approval_mode is ApprovalMode.READONLY:
        return "denied: this task is read-only; it may not write files or run commands"
    if call.name == "run":
        command = str(call.args.get("command", ""))
        tool, detail, tool_input = "Bash", command, {"command": command}
    else:
        path = ctx.tools.relative(ctx.tools.writable(call.args.get("path")))
        tool = "Write" if call.name == "write_file" else "Edit"
        detail = path
        tool_input = {"file_path": path, **_edit_input(call.args)}
    if spec.approval_mode is ApprovalMode.SANDBOX:
        return None  # writes stay inside the directory; commands run in bubblewrap
    if allowed((*spec.allowed_tools, *turn.remembered), tool, detail):
        return None
    rule = f"{tool}({detail})"
    decision = await ctx.approver.decide(ApprovalRequest(tool, tool_input, call.id, rule))
    if decision.allow:
        if decision.always:
            turn.remembered.append(rule)
        return None
    return f"denied by the owner: {decision.message or 'not allowed'}"


def _edit_input(args: dict[str, Any]) -> dict[str, Any]:
    if "old_text" in args:
        return {"old_string": str(args.get("old_text")), "new_string": str(args.get("new_text"))}
    return {"content": str(args.get("content", ""))}
