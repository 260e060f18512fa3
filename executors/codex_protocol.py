"""Codex app-server (0.171.0) protocol: notifications -> AgentEvents, approval requests ->
ApprovalRequests, decisions -> JSON-RPC results. Pure functions and one small state object."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.events import (
    AgentEvent,
    ApprovalDecision,
    ApprovalRequest,
    LimitReached,
    TextEmitted,
    ToolCalled,
    ToolFinished,
    TurnFinished,
    Usage,
    UsageUpdated,
    WindowReported,
    detail_of,
)

COMMAND_APPROVAL = "item/commandExecution/requestApproval"
FILE_APPROVAL = "item/fileChange/requestApproval"


@dataclass
class TurnState:
    """What one turn has seen so far: file changes (their approval requests hold no diff), the
    usage of each model request, the last answer and the last error."""

    changes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    last_text: str = ""
    error: str | None = None

    def add_usage(self, last: dict[str, Any]) -> None:
        """One model request's tokens; Codex's ``inputTokens`` include the cached ones, which
        are priced apart (``Usage.input_tokens`` are the uncached, as Claude counts them)."""
        cached = int(last.get("cachedInputTokens") or 0)
        uncached = max(0, int(last.get("inputTokens") or 0) - cached)
        self.usage = Usage(
            input_tokens=self.usage.input_tokens + uncached,
            output_tokens=self.usage.output_tokens + int(last.get("outputTokens") or 0),
            cache_read_tokens=self.usage.cache_read_tokens + cached,
            cache_write_tokens=self.usage.cache_write_tokens
            + int(last.get("cacheWriteInputTokens") or 0),
        )


def notification_events(method: str, params: dict[str, Any], state: TurnState) -> list[AgentEvent]:
    if method == "account/rateLimits/updated":  # the plan's windows, after each response
        return rate_limit_windows(params.get("rateLimits"))
    return _turn_events(method, params, state)


def _turn_events(method: str, params: dict[str, Any], state: TurnState) -> list[AgentEvent]:
    item = params.get("item") or {}
    kind = item.get("type")
    if method == "item/started" and kind == "commandExecution":
        detail = detail_of(str(item.get("command") or ""))
        return [ToolCalled(str(item.get("id")), "Bash", _command(item), detail=detail)]
    if method == "item/started" and kind == "fileChange":
        state.changes[str(item.get("id"))] = list(item.get("changes") or [])
        return [
            ToolCalled(
                str(item.get("id")),
                "Edit",
                ", ".join(str(c.get("path")) for c in item.get("changes") or []),
                detail=detail_of(_changes(item)),
            )
        ]
    if method == "item/started" and kind in OTHER_TOOLS:
        args = item.get("arguments") or item.get("prompt") or item.get("revisedPrompt") or ""
        name, summary = _tool_name(item), _tool_summary(item)
        return [ToolCalled(str(item.get("id")), name, summary, detail=detail_of(args))]
    if method == "item/completed" and kind in ("commandExecution", "fileChange", *OTHER_TOOLS):
        ok = item.get("status") == "completed" and item.get("exitCode") in (None, 0)
        return [
            ToolFinished(
                str(item.get("id")),
                not ok,
                str(item.get("aggregatedOutput") or item.get("status") or ""),
            )
        ]
    if method == "item/completed" and kind == "agentMessage" and item.get("text"):
        state.last_text = str(item["text"])
        return [TextEmitted(state.last_text)]
    if method == "thread/tokenUsage/updated":
        state.add_usage((params.get("tokenUsage") or {}).get("last") or {})
        return [UsageUpdated(state.usage)]
    if method == "error" and not params.get("willRetry"):
        error = params.get("error") or {}
        state.error = str(error.get("message") or "error")
        if error.get("codexErrorInfo") == USAGE_LIMIT:
            return [LimitReached(try_again_at(state.error, datetime.now().astimezone()), "usage")]
    elif method == "turn/completed":
        return [_finished(params.get("turn") or {}, state)]
    return []


# a window's length in minutes -> its name as Claude's events name the same windows
WINDOW_NAMES = {300: "five_hour", 10080: "seven_day"}


def rate_limit_windows(limits: Any) -> list[AgentEvent]:
    """``account/rateLimits/updated`` (0.171.0's JSON schema, ``codex app-server
    generate-json-schema``): ``rateLimits.primary`` / ``.secondary`` = ``{usedPercent,
    windowDurationMins, resetsAt}``, sparse; its windows as WindowReported."""
    if not isinstance(limits, dict):
        return []
    found: list[AgentEvent] = []
    for slot in ("primary", "secondary"):
        window = limits.get(slot)
        if not isinstance(window, dict) or not isinstance(window.get("usedPercent"), int | float):
            continue
        minutes, resets = window.get("windowDurationMins"), window.get("resetsAt")
        name = WINDOW_NAMES.get(minutes) if isinstance(minutes, int) else None
        when = (
            datetime.fromtimestamp(resets, UTC)
            if isinstance(resets, int | float) and 0 < resets < 1e11
            else None
        )
        used = min(max(float(window["usedPercent"]) / 100, 0.0), 10.0)
        found.append(WindowReported(name or (f"{minutes}m" if minutes else slot), used, when))
    return found


USAGE_LIMIT = "usageLimitExceeded"  # the error's codexErrorInfo (0.171.0, measured)
# "try again at 3:59 PM", or on another day "try again at Dec 2nd, 2026 12:10 AM" (0.171.0)
_AT = re.compile(
    r"try again at (?:([A-Z][a-z]{2}) (\d{1,2})(?:st|nd|rd|th)?, (\d{4}) )?"
    r"(\d{1,2}):(\d{2})\s*([AP]M)?",
    re.IGNORECASE,
)
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]


def try_again_at(message: str, now: datetime) -> datetime | None:
    """When a Codex limit message says to come back (a wall clock time in the zone Codex runs
    in, which is the bot's: ``now`` carries it): that day's, when it names one, else the next
    such moment after ``now``. None when the message names no time."""
    found = _AT.search(message)
    if found is None:
        return None
    month, day, year, hour, minute = found[1], found[2], found[3], int(found[4]), int(found[5])
    if found[6]:
        hour = hour % 12 + (12 if found[6].upper() == "PM" else 0)
    try:
        at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if month is not None:
            at = at.replace(year=int(year), month=_MONTHS.index(month.lower()) + 1, day=int(day))
            return at
    except ValueError:  # 25:00, Feb 30th, a month we do not know
        return None
    return at if at > now else at + timedelta(days=1)


# items that are a tool's call besides a command or a file change (0.171.0's schema): an MCP
# server's tool, a client's tool, a sub-agent, a generated image saved to a file
OTHER_TOOLS = ("mcpToolCall", "dynamicToolCall", "collabAgentToolCall", "imageGeneration")


def _tool_name(item: dict[str, Any]) -> str:
    if item.get("type") == "mcpToolCall":
        return f"mcp__{item.get('server')}__{item.get('tool')}"
    return str(item.get("tool") or item.get("type"))


def _tool_summary(item: dict[str, Any]) -> str:
    return str(item.get("arguments") or item.get("prompt") or item.get("revisedPrompt") or "")[:200]


def _changes(item: dict[str, Any]) -> str:
    """A file change's paths, each with its diff when Codex sent one."""
    parts = []
    for change in item.get("changes") or []:
        diff = change.get("diff") if isinstance(change, dict) else None
        path = change.get("path") if isinstance(change, dict) else change
        parts.append(f"{path}\n{diff}" if isinstance(diff, str) and diff else str(path))
    return "\n".join(parts)


def _command(item: dict[str, Any]) -> str:
    actions = item.get("commandActions") or []
    if actions and actions[0].get("command"):
        return str(actions[0]["command"])
    return str(item.get("command") or "")


def _finished(turn: dict[str, Any], state: TurnState) -> TurnFinished:
    status = turn.get("status")
    error = (turn.get("error") or {}).get("message") or state.error
    failed = status != "completed"
    text = state.last_text if not failed else (error or f"turn {status}")
    return TurnFinished(
        is_error=failed,
        result_text=text,
        session_id=None,
        cost_usd=None,
        usage=state.usage,
        subtype=str(status),
        errors=(error,) if failed and error else (),
    )


def approval_request(method: str, params: dict[str, Any], state: TurnState) -> ApprovalRequest:
    if method == COMMAND_APPROVAL:
        actions = params.get("commandActions") or []
        command = str(actions[0].get("command")) if actions else str(params.get("command"))
        amendment = params.get("proposedExecpolicyAmendment") or []
        rule = f"Bash({' '.join(amendment)})" if amendment else f"Bash({command})"
        return ApprovalRequest(
            tool_name="Bash",
            tool_input={"command": command, "description": params.get("reason") or ""},
            tool_use_id=str(params.get("itemId")),
            rule=rule,
        )
    changes = state.changes.get(str(params.get("itemId")), [])
    paths = ", ".join(str(c.get("path")) for c in changes) or "?"
    diff = "\n".join(str(c.get("diff") or "") for c in changes)
    return ApprovalRequest(
        tool_name="Edit",
        tool_input={"file_path": paths, "content": diff},
        tool_use_id=str(params.get("itemId")),
        rule=f"Edit({paths})",
        blocked_path=params.get("grantRoot"),
    )


def decision_result(decision: ApprovalDecision) -> dict[str, Any]:
    if not decision.allow:
        return {"decision": "decline"}
    return {"decision": "acceptForSession" if decision.always else "accept"}
