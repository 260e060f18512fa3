"""The local engine's conversation in the Chat Completions format: its system prompt, the
assistant's and the tools' messages, and keeping it within the model's context window."""

from __future__ import annotations

import json
from typing import Any

from bot.models import TurnSpec
from executors.local_pieces import CHARS_PER_TOKEN
from executors.local_tools import capped

TOOL_NOTES = (
    "You work in the directory {cwd} through the tools you are given: read_file, write_file, "
    "edit_file, list_files, grep and run (a shell command). Paths are relative to that "
    "directory and may not leave it. When you are done, answer with a short summary of what "
    "you did, without calling a tool."
)
SHORTENED = "[shortened to fit the context window: {cut} of {total} characters left out]"
KEEP_RECENT = 4  # the newest tool results are never shortened
FIT_SHARE = 0.75  # shorten when the conversation's estimate passes this share of the window


def system_prompt(spec: TurnSpec) -> str:
    notes = TOOL_NOTES.format(cwd=spec.cwd)
    return f"{notes}\n\n{spec.append_system_prompt}" if spec.append_system_prompt else notes


def assistant(text: str, calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return message


def tool_result(call_id: str, output: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": capped(output)}


def fit(messages: list[dict[str, Any]], context_window: int) -> None:
    """Shorten the oldest tool results (never the newest few) while the conversation's
    estimate is over its share of the context window; each says what was left out."""
    budget = context_window * FIT_SHARE * CHARS_PER_TOKEN
    size = sum(len(json.dumps(m)) for m in messages)
    results = [m for m in messages if m.get("role") == "tool"][:-KEEP_RECENT]
    for message in results:
        if size <= budget:
            return
        content = str(message.get("content") or "")
        if len(content) <= 400 or content.startswith("[shortened"):
            continue
        short = content[:300]
        note = SHORTENED.format(cut=len(content) - len(short), total=len(content))
        message["content"] = f"{note}\n{short}"
        size -= len(content) - len(message["content"])
