"""Claude Code's stream-json protocol (2.1.197): output lines -> AgentEvents, and the stdio
control requests of ``--permission-prompt-tool stdio`` -> ApprovalRequests. Pure functions."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from bot.events import (
    AgentEvent,
    ApprovalRequest,
    LimitReached,
    Question,
    SessionStarted,
    TextEmitted,
    ToolCalled,
    ToolFinished,
    TurnFinished,
    Usage,
    WindowReported,
    detail_of,
)

log = logging.getLogger(__name__)
# Claude Code's tools that change no file in the task's directory (TodoWrite keeps its list in
# the CLI's own state); any other, Bash and MCP tools included, may
READ_ONLY_TOOLS = frozenset(
    {"Read", "Glob", "Grep", "LS", "NotebookRead", "WebFetch", "WebSearch", "TodoWrite"}
)


def control_error(request_id: str, error: str) -> dict[str, Any]:
    return {
        "type": "control_response",
        "response": {"subtype": "error", "request_id": request_id, "error": error},
    }


def approval_request(request: dict[str, Any]) -> ApprovalRequest:
    """A ``can_use_tool`` control request -> an engine-neutral ApprovalRequest."""
    tool = str(request.get("tool_name") or "?")
    tool_input = _obj(request.get("input"))
    questions = (
        tuple(
            Question(
                text=str(q.get("question", "")),
                header=str(q.get("header", "")),
                options=tuple(str(o.get("label", "")) for o in _blocks(q.get("options"))),
                multi=bool(q.get("multiSelect")),
            )
            for q in _blocks(tool_input.get("questions"))
        )
        if tool == "AskUserQuestion"
        else ()
    )
    return ApprovalRequest(
        tool_name=tool,
        tool_input=tool_input,
        tool_use_id=str(request.get("tool_use_id", "")),
        rule=_suggested_rule(tool, request.get("permission_suggestions")),
        blocked_path=request.get("blocked_path"),
        questions=questions,
    )


def _suggested_rule(tool: str, suggestions: Any) -> str:
    """The CLI's own suggested allow rule (e.g. ``Bash(npm test:*)``), else the whole tool."""
    for suggestion in _blocks(suggestions):
        if suggestion.get("type") == "addRules" and suggestion.get("behavior") == "allow":
            for rule in _blocks(suggestion.get("rules")):
                name, content = rule.get("toolName") or tool, rule.get("ruleContent")
                return f"{name}({content})" if content else str(name)
    return tool


def json_object(line: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def _obj(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one: the CLI's lines are outside data."""
    return value if isinstance(value, dict) else {}


def _blocks(value: Any) -> list[dict[str, Any]]:
    return [b for b in value if isinstance(b, dict)] if isinstance(value, list) else []


def _count(value: Any) -> int:
    """A token count; anything that is not a non-negative number counts as 0."""
    return int(value) if isinstance(value, int | float) and 0 <= value < 2**53 else 0


def session_id_of(value: Any) -> str | None:
    """A session id the CLI can be resumed with (a UUID), else None."""
    try:
        return str(uuid.UUID(str(value))) if value else None
    except ValueError:
        log.warning("claude: ignored a session id that is not a UUID: %.80r", value)
        return None


def parse_event(data: dict[str, Any]) -> list[AgentEvent]:
    """One stream-json object -> zero or more events. Unknown or oddly shaped ones are ignored,
    never fatal."""
    kind = data.get("type")
    if kind == "system" and data.get("subtype") == "init":
        session_id = session_id_of(data.get("session_id"))
        model = data.get("model")
        return (
            [SessionStarted(session_id, model if isinstance(model, str) else None)]
            if session_id
            else []
        )
    if kind == "assistant":
        return _assistant_events(_obj(data.get("message")))
    if kind == "user":
        return _tool_results(_obj(data.get("message")))
    if kind == "result":
        final = _result(data)
        if data.get("api_error_status") == 429:  # also an API key's rate limit: no reset time
            return [LimitReached(None, "429"), final]
        return [final]
    if kind == "rate_limit_event":
        return _limit(_obj(data.get("rate_limit_info")))
    return []


def _limit(info: dict[str, Any]) -> list[AgentEvent]:
    """Measured with 2.1.197 and a subscription login: a 429 whose
    ``anthropic-ratelimit-unified-*`` headers say "rejected" gives ``{"type":
    "rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":<epoch s>,
    "rateLimitType":"five_hour",…}}`` before an error result "You've hit your session limit ·
    resets 3:59pm (UTC)" (tests/fixtures/limits/). A window past the API's threshold
    (``-surpassed-threshold`` headers) gives status ``allowed_warning`` with ``utilization``
    (0..1): not a stop, a window to show (WindowReported)."""
    status, window = info.get("status"), str(info.get("rateLimitType") or "")
    resets = info.get("resetsAt")
    when = (
        datetime.fromtimestamp(resets, UTC)
        if isinstance(resets, int | float) and 0 < resets < 1e11
        else None
    )
    if status == "allowed_warning" and window and not info.get("isUsingOverage"):
        used = info.get("utilization")
        share = float(used) if isinstance(used, int | float) and 0 <= used <= 10 else None
        return [WindowReported(window[:40], share, when)]
    if status != "rejected":
        return []
    return [LimitReached(when, window)]


def _assistant_events(message: dict[str, Any]) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for block in _blocks(message.get("content")):
        if block.get("type") == "text" and block.get("text"):
            events.append(TextEmitted(str(block["text"])))
        elif block.get("type") == "tool_use":
            name = str(block.get("name", "?"))
            events.append(
                ToolCalled(
                    str(block.get("id", "")),
                    name,
                    summarize_input(_obj(block.get("input"))),
                    reads_only=name in READ_ONLY_TOOLS,
                    detail=detail_of(_obj(block.get("input"))),
                )
            )
    return events


def _tool_results(message: dict[str, Any]) -> list[AgentEvent]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [
        ToolFinished(
            str(b.get("tool_use_id", "")),
            bool(b.get("is_error")),
            _text_of(b.get("content"))[:4000],
        )
        for b in content
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


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


def _cost(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and 0 <= value < 1e9 else None


def _result(data: dict[str, Any]) -> TurnFinished:
    usage = _obj(data.get("usage"))
    denials = tuple(
        f"{d.get('tool_name', '?')}: {summarize_input(_obj(d.get('tool_input')))}"
        for d in _blocks(data.get("permission_denials"))
    )
    errors = data.get("errors")
    return TurnFinished(
        is_error=bool(data.get("is_error")),
        result_text=str(data.get("result") or ""),
        session_id=session_id_of(data.get("session_id")),
        cost_usd=_cost(data.get("total_cost_usd")),
        usage=Usage(
            input_tokens=_count(usage.get("input_tokens")),
            output_tokens=_count(usage.get("output_tokens")),
            cache_read_tokens=_count(usage.get("cache_read_input_tokens")),
            cache_write_tokens=_count(usage.get("cache_creation_input_tokens")),
        ),
        num_turns=_count(data.get("num_turns")),
        denials=denials,
        errors=tuple(str(e) for e in errors) if isinstance(errors, list) else (),
        subtype=str(data.get("subtype") or ""),
        extra={
            "api_error_status": data.get("api_error_status"),
            "terminal_reason": data.get("terminal_reason"),
        },
    )
