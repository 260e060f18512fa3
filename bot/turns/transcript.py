"""A task's transcript as a person reads it: what the agent said, each tool it called and the
short result, how each turn ended — not event names, and the answer once (it is the agent's
last words already)."""

from __future__ import annotations

from typing import Any

from bot.telegram.render import shorten

SAID_CHARS = 600
TOOL_CHARS = 200
PROMPTED = "Prompted"  # a later turn starts: what it asks (a follow-up's words, a retry's…)
SAID = frozenset({PROMPTED, "SteerTaken"})  # the owner's words, where they reached the agent


def prompted(seq: int, prompt: str) -> list[tuple[str, dict[str, Any]]]:
    """The transcript entry of turn ``seq``'s prompt as it starts: none for the first (the
    goal, shown apart), so a follow-up's words stand where its turn begins."""
    return [] if seq == 1 else [(PROMPTED, {"seq": seq, "text": prompt})]


TREE_NOTES = {"Reported": "report from", "Messaged": "message from"}


def human_line(kind: str, body: dict[str, Any]) -> str | None:
    """One event of the transcript as a line (None: nothing a person needs to read)."""
    if kind == "TextEmitted":
        return f"💬 {shorten(str(body.get('text', '')).strip(), SAID_CHARS)}"
    if kind == "ToolCalled":
        summary = shorten(str(body.get("summary", "")), TOOL_CHARS, one_line=True)
        return f"▸ {body.get('name', '?')}: {summary}"
    if kind == "ToolFinished":
        output = str(body.get("output", "")).strip()
        first = shorten(output, TOOL_CHARS, one_line=True) if output else "(no output)"
        return f"  ↳ {'✗ ' if body.get('is_error') else ''}{first}"
    if kind == "TurnFinished":
        if body.get("is_error"):
            errors = "; ".join(str(e) for e in body.get("errors") or ()) or body.get("subtype")
            return f"✖ the turn failed: {shorten(str(errors or ''), TOOL_CHARS, one_line=True)}"
        return "✔ the turn ended"
    mark = _words_mark(kind, body)
    if mark is not None:
        return f"{mark} {shorten(str(body.get('text', '')).strip(), SAID_CHARS)}"
    if kind in TREE_NOTES:  # a sub-task's report, a sibling's message (bot.tasks.family)
        said = shorten(str(body.get("text", "")).strip(), SAID_CHARS)
        return f"📨 {TREE_NOTES[kind]} {body.get('from_label', '?')}: {said}"
    if kind == "Retrying":
        return f"⟳ the endpoint answered {body.get('status')}; retry {body.get('attempt')}"
    if kind == "AtTerminal":  # hand-off: the session was written at a terminal meanwhile
        return f"🖥 at the terminal from {_minute(body.get('from'))} to {_minute(body.get('to'))}"
    return None  # session ids, usage counters: bookkeeping


def _words_mark(kind: str, body: dict[str, Any]) -> str | None:
    """The mark of an event that is somebody's words: the owner's message taken into the
    running turn, or as its own turn (a retry's too), or the agent's note (``notify``)."""
    if kind == "SteerTaken":
        return "➡️"
    if kind == PROMPTED:
        return "↪️"
    if kind == "Notified":
        return "📣❗" if body.get("urgent") else "📣"
    if kind == "AskedOwner":  # the agent's ask_owner and its answer
        return "❓"
    return None


def _minute(iso: object) -> str:
    """``2026-12-05T14:02:31.5+00:00`` as ``2026-12-05 14:02 UTC``."""
    text = str(iso or "?")
    return f"{text[:10]} {text[11:16]} UTC" if len(text) >= 16 else text
