"""Claude Code's stream-json protocol (2.1.197): output lines -> AgentEvents, and the stdio
control requests of ``--permission-prompt-tool stdio`` -> ApprovalRequests. Pure functions."""

from __future__ import annotations

import json
from typing import Any

from bot.models import (
    AgentEvent,
    ApprovalRequest,
    Question,
    SessionStarted,
    TextEmitted,
    ToolCalled,
    ToolFinished,
    TurnFinished,
    Usage,
)


def control_error(request_id: str, error: str) -> dict[str, Any]:
    return {"type": "control_response",
            "response": {"subtype": "error", "request_id": request_id, "error": error}}


def approval_request(request: dict[str, Any]) -> ApprovalRequest:
    """A ``can_use_tool`` control request -> an engine-neutral ApprovalRequest."""
    tool = str(request.get("tool_name") or "?")
    tool_input = request.get("input") or {}
    questions = tuple(
        Question(text=str(q.get("question", "")), header=str(q.get("header", "")),
                 options=tuple(str(o.get("label", "")) for o in q.get("options") or []),
                 multi=bool(q.get("multiSelect")))
        for q in tool_input.get("questions") or [] if isinstance(q, dict)
    ) if tool == "AskUserQuestion" else ()
    return ApprovalRequest(tool_name=tool, tool_input=tool_input,
                           tool_use_id=str(request.get("tool_use_id", "")),
                           rule=_suggested_rule(tool, request.get("permission_suggestions")),
                           blocked_path=request.get("blocked_path"), questions=questions)


def _suggested_rule(tool: str, suggestions: Any) -> str:
    """The CLI's own suggested allow rule (e.g. ``Bash(npm test:*)``), else the whole tool."""
    for suggestion in suggestions or []:
        if suggestion.get("type") == "addRules" and suggestion.get("behavior") == "allow":
            for rule in suggestion.get("rules") or []:
                name, content = rule.get("toolName") or tool, rule.get("ruleContent")
                return f"{name}({content})" if content else str(name)
    return tool


def json_object(line: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def parse_event(data: dict[str, Any]) -> list[AgentEvent]:
    """One stream-json object -> zero or more events. Unknown ones are ignored, never fatal."""
    kind = data.get("type")
    if kind == "system" and data.get("subtype") == "init" and data.get("session_id"):
        return [SessionStarted(str(data["session_id"]), data.get("model"))]
    if kind == "assistant":
        return _assistant_events(data.get("message") or {})
    if kind == "user":
        return _tool_results(data.get("message") or {})
    if kind == "result":
        return [_result(data)]
    return []


def _assistant_events(message: dict[str, Any]) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for block in message.get("content") or []:
        if block.get("type") == "text" and block.get("text"):
            events.append(TextEmitted(block["text"]))
        elif block.get("type") == "tool_use":
            events.append(ToolCalled(str(block.get("id", "")), str(block.get("name", "?")),
                                     summarize_input(block.get("input") or {})))
    return events


def _tool_results(message: dict[str, Any]) -> list[AgentEvent]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [ToolFinished(str(b.get("tool_use_id", "")), bool(b.get("is_error")),
                         _text_of(b.get("content"))[:4000])
            for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return ""


def summarize_input(tool_input: dict[str, Any]) -> str:
    for key in ("command", "file_path", "path", "pattern", "url", "description"):
        if isinstance(tool_input.get(key), str):
            return tool_input[key][:300]
    return json.dumps(tool_input, ensure_ascii=False)[:300]


def _result(data: dict[str, Any]) -> TurnFinished:
    usage = data.get("usage") or {}
    denials = tuple(f"{d.get('tool_name', '?')}: {summarize_input(d.get('tool_input') or {})}"
                    for d in data.get("permission_denials") or [] if isinstance(d, dict))
    return TurnFinished(
        is_error=bool(data.get("is_error")),
        result_text=str(data.get("result") or ""),
        session_id=data.get("session_id"),
        cost_usd=data.get("total_cost_usd"),
        usage=Usage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
            cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0)),
        num_turns=int(data.get("num_turns") or 0),
        denials=denials,
        errors=tuple(str(e) for e in data.get("errors") or []),
        subtype=str(data.get("subtype") or ""),
        extra={"api_error_status": data.get("api_error_status"),
               "terminal_reason": data.get("terminal_reason")},
    )
