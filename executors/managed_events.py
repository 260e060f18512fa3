"""Managed Agents session events (the SSE stream of ``/v1/sessions/{id}/events/stream``, as
dicts) in Detach's words: text, tool calls and results, usage per model request; the turn ends
at ``session.status_idle`` (its ``stop_reason``) once the session ran for our message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bot.errors import AgentCrashed
from bot.events import (
    AgentEvent,
    TextEmitted,
    ToolCalled,
    ToolFinished,
    TurnFinished,
    Usage,
    UsageUpdated,
    detail_of,
)
from bot.models import Phrase

SUMMARY_CHARS = 120
# the ``agent.*`` events, by their names after ``agent.``
TOOL_USES = ("tool_use", "mcp_tool_use", "custom_tool_use")
TOOL_RESULTS = ("tool_result", "mcp_tool_result")
READ_TOOLS = frozenset({"read", "glob", "grep", "web_fetch", "web_search"})


@dataclass(slots=True)
class TurnReading:
    """What one turn's events said so far."""

    session_id: str
    usage: Usage = field(default_factory=Usage)
    text: str = ""
    requests: int = 0
    running: bool = False  # the session ran since our message (an idle before is not ours)
    errors: list[str] = field(default_factory=list)
    over: bool = False


def events_of(event: dict[str, Any], turn: TurnReading) -> list[AgentEvent]:
    """The events one API event means; an unknown type means none."""
    kind = str(event.get("type") or "")
    source, _, name = kind.partition(".")
    if kind == "session.status_running" or source in ("agent", "span"):
        turn.running = True
    if source == "agent":
        return _agent(name, event, turn)
    if kind == "span.model_request_end":
        turn.requests += 1
        turn.usage = _add(turn.usage, event.get("model_usage") or {})
        return [UsageUpdated(turn.usage)]
    if kind == "session.error":
        error = event.get("error") or {}
        turn.errors.append(str(error.get("message") or error.get("type") or "error"))
        return []
    if kind == "session.status_terminated":
        raise ended(turn.errors[-1] if turn.errors else "the session terminated")
    if kind == "session.status_idle" and turn.running:
        return [_finished(event, turn)]
    return []


def _agent(name: str, event: dict[str, Any], turn: TurnReading) -> list[AgentEvent]:
    """What the agent said (``message``) or did (its tools and their results)."""
    if name == "message":
        text = _text(event.get("content"))
        turn.text = text or turn.text
        return [TextEmitted(text)] if text else []
    if name in TOOL_USES:
        return [_tool_called(event)]
    if name in TOOL_RESULTS:
        output = _text(event.get("content"))
        return [ToolFinished(str(event.get("tool_use_id")), bool(event.get("is_error")), output)]
    return []


def _finished(event: dict[str, Any], turn: TurnReading) -> TurnFinished:
    """``end_turn``: the answer; any other stop (``requires_action``, ``retries_exhausted``,
    ``budget_reached``, ``refusal``) fails the turn and says which."""
    turn.over = True
    reason = str((event.get("stop_reason") or {}).get("type") or "end_turn")
    failed = reason != "end_turn"
    said = turn.text
    if failed:
        said = f"the remote session stopped: {reason}" + "".join(f"; {e}" for e in turn.errors)
    return TurnFinished(
        is_error=failed,
        result_text=said,
        session_id=turn.session_id,
        cost_usd=None,  # priced by the bot from the usage (bot.money)
        usage=turn.usage,
        num_turns=turn.requests,
        errors=tuple(turn.errors),
        subtype=reason,
    )


def _tool_called(event: dict[str, Any]) -> ToolCalled:
    name = str(event.get("name") or "tool")
    tool_input = event.get("input") or {}
    first = next(iter(tool_input.values()), "") if isinstance(tool_input, dict) else tool_input
    summary = f"{name} {first}" if isinstance(first, str) and first else name
    return ToolCalled(
        str(event.get("id")),
        name,
        summary.splitlines()[0][:SUMMARY_CHARS] if summary else name,
        reads_only=name in READ_TOOLS,
        detail=detail_of(tool_input),
    )


def _text(content: object) -> str:
    """The text blocks of an event's content, joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [str(b.get("text") or "") for b in content if isinstance(b, dict)]
    return "\n".join(p for p in parts if p)


def _add(usage: Usage, model_usage: dict[str, Any]) -> Usage:
    def tokens(key: str) -> int:
        value = model_usage.get(key)
        return value if isinstance(value, int) and value > 0 else 0

    return Usage(
        usage.input_tokens + tokens("input_tokens"),
        usage.output_tokens + tokens("output_tokens"),
        usage.cache_read_tokens + tokens("cache_read_input_tokens"),
        usage.cache_write_tokens + tokens("cache_creation_input_tokens"),
    )


def ended(reason: str) -> AgentCrashed:
    """The session is over (terminated, or its stream closed before it was idle)."""
    return AgentCrashed(
        f"the remote session ended: {reason}",
        None,
        "",
        Phrase("agent.managed_ended", {"reason": reason}),
    )
