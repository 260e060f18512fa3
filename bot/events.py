"""What an agent says while its turn runs, in words no engine owns: the events an executor
yields (its session, text, tool calls and results, usage, its verdict, a usage limit) and the
approvals it asks for, with the answers it gets."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

DETAIL_CHARS = 16_000  # a tool call's full input as kept: at most this many characters

# --- approvals: what an agent asks, and the answer it gets ------------------------------------


@dataclass(frozen=True, slots=True)
class Question:
    """One of an agent's questions (Claude's AskUserQuestion) with its options."""

    text: str
    header: str
    options: tuple[str, ...]
    multi: bool = False


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A tool call waiting for permission; ``rule`` is what "Always" would remember."""

    tool_name: str
    tool_input: dict[str, Any]
    tool_use_id: str
    rule: str
    blocked_path: str | None = None
    questions: tuple[Question, ...] = ()


@dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """Allow or deny; ``message`` tells the agent why it was denied; ``answers`` carries the
    chosen option labels of an agent's questions, keyed by question text."""

    allow: bool
    message: str = ""
    answers: dict[str, str] | None = None
    always: bool = False  # the owner chose Always: an engine may remember it for the session


# --- engine-neutral agent events -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionStarted:
    session_id: str
    model: str | None = None


@dataclass(frozen=True, slots=True)
class TextEmitted:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCalled:
    """``reads_only``: the engine knows this tool changes no file (a turn whose tools all only
    read changed nothing: its card asks git nothing). Unknown tools are taken to change files.
    ``summary``: one short line; ``detail``: the whole input as a person reads it (``detail_of``,
    at most ``DETAIL_CHARS``), empty when the engine gave none beyond the summary."""

    tool_use_id: str
    name: str
    summary: str
    reads_only: bool = False
    detail: str = ""


def detail_of(tool_input: object) -> str:
    """A tool's input as text: a string as it is; a mapping one ``key: value`` line per key, a
    value of several lines below its key; cut to ``DETAIL_CHARS``."""
    if isinstance(tool_input, dict):
        parts = []
        for key, value in tool_input.items():
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            parts.append(f"{key}:\n{text}" if "\n" in text else f"{key}: {text}")
        text = "\n".join(parts)
    else:
        text = str(tool_input)
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS] + "\n… cut"


@dataclass(frozen=True, slots=True)
class ToolFinished:
    tool_use_id: str
    is_error: bool
    output: str


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0


@dataclass(frozen=True, slots=True)
class UsageUpdated:
    """Tokens used so far in this turn (engines that report usage while they run)."""

    usage: Usage


@dataclass(frozen=True, slots=True)
class TurnFinished:
    """The agent's own verdict on the turn (Claude: the ``result`` line)."""

    is_error: bool
    result_text: str
    session_id: str | None
    cost_usd: float | None
    usage: Usage
    num_turns: int = 0
    denials: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    subtype: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Retrying:
    """The engine's model endpoint failed and the call will be tried again (the local engine,
    on a 429 or a 5xx): ``status``, the endpoint's HTTP status; ``attempt``, the retry about
    to start (1, 2, …); ``delay_s``, the wait before it. Said on the progress line."""

    status: int
    attempt: int
    delay_s: float


@dataclass(frozen=True, slots=True)
class LimitReached:
    """The engine's plan or account limit stopped the turn (not a failure of the work): when it
    resets, if the engine said (Claude's ``rate_limit_event``, Codex's "try again at …")."""

    resets_at: datetime | None
    message: str = ""


@dataclass(frozen=True, slots=True)
class WindowReported:
    """The engine reported one of its plan's usage windows (Claude 2.1.197: a
    ``rate_limit_event`` with status ``allowed_warning``, once per process, only past the
    threshold the API names): ``window`` as the engine names it (``five_hour``, ``seven_day``,
    …), ``used`` the share of it used (0..1), ``resets_at`` when it starts anew."""

    window: str
    used: float | None
    resets_at: datetime | None


AgentEvent = (
    SessionStarted
    | TextEmitted
    | ToolCalled
    | ToolFinished
    | UsageUpdated
    | TurnFinished
    | LimitReached
    | Retrying
    | WindowReported
)
