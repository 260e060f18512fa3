"""A transcript event as an item, the one shape every reader shares: the board draws it, the
JSONL export writes it a line each. Bookkeeping (session ids, usage) makes no item."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.events import DETAIL_CHARS
from bot.store.transcript import TranscriptLine
from bot.turns.transcript import SAID

TOOL_INPUT_CHARS = 4000
TOOL_DETAIL_CHARS = DETAIL_CHARS + 16  # the executors cap it (with their "cut" mark)
TOOL_OUTPUT_CHARS = 20_000


def transcript_item(line: TranscriptLine, clip: bool = True) -> dict[str, Any] | None:
    """One event as an item; None: bookkeeping nobody reads. ``clip``: tool fields cut to
    what a page draws (an export keeps them whole)."""
    body, kind = line.body, line.kind
    base: dict[str, Any] = {"line": line.line, "turn": line.turn_id, "at": _iso(line.created_at)}
    if kind == "TextEmitted":
        return {**base, "kind": "text", "text": str(body.get("text", ""))}
    if kind == "ToolCalled":
        return {**base, "kind": "tool", **_tool(body, clip)}
    if kind == "ToolFinished":
        output = str(body.get("output", ""))
        return {
            **base,
            "kind": "result",
            "tool": str(body.get("tool_use_id", "")),
            "error": bool(body.get("is_error")),
            "output": output[:TOOL_OUTPUT_CHARS] if clip else output,
        }
    if kind in SAID:  # the owner's words, as they reached the agent
        steered = kind == "SteerTaken"
        return {**base, "kind": "said", "text": str(body.get("text", "")), "steered": steered}
    if kind == "TurnFinished":
        errors = "; ".join(str(e) for e in body.get("errors") or ()) or body.get("subtype")
        failed = bool(body.get("is_error"))
        return {**base, "kind": "end", "error": failed, "text": str(errors or "") if failed else ""}
    if kind == "Notified":  # the agent's note to its owner
        return {
            **base,
            "kind": "note",
            "text": str(body.get("text", "")),
            "urgent": bool(body.get("urgent")),
        }
    if kind in ("Reported", "Messaged"):  # within a sub-task tree (bot.tasks.family)
        said = f"📨 {body.get('from_label', '?')}: {body.get('text', '')}"
        return {**base, "kind": "note", "text": said, "urgent": False}
    if kind == "AskedOwner":  # the agent's question to its owner, and the answer
        return {**base, "kind": "note", "text": "❓ " + str(body.get("text", "")), "urgent": False}
    if kind == "Retrying":
        return {**base, "kind": "retry", "text": f"{body.get('status')} #{body.get('attempt')}"}
    return None


def _tool(body: dict[str, Any], clip: bool) -> dict[str, str]:
    summary, detail = str(body.get("summary", "")), str(body.get("detail", ""))
    return {
        "tool": str(body.get("tool_use_id", "")),
        "name": str(body.get("name", "?")),
        "input": summary[:TOOL_INPUT_CHARS] if clip else summary,
        "detail": detail[:TOOL_DETAIL_CHARS] if clip else detail,
    }


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None
