"""The tokens a session on this machine used, from its own file (``executors.sessions``), for
the card of an adopted session: Claude Code's assistant messages each carry their usage (one
line per content block, the same ``message.id``: counted once), Codex's rollout keeps a running
``total_token_usage`` (its last one says). The file is hostile input: read line by line, at most
``USAGE_BYTES``; a bigger file, or one naming no usage, is None (unknown), never a guess."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bot.events import Usage

USAGE_BYTES = 64 * 1024 * 1024  # a session file past this is not summed: its usage is unknown
LINE_BYTES = 4 * 1024 * 1024  # a longer line is skipped whole
SYNTHETIC = "<synthetic>"  # Claude's stand-in message for an API error: no tokens of a model


def claude_usage(path: Path) -> Usage | None:
    """What the session's model messages used, each message once (its largest count)."""
    by_message: dict[str, Usage] = {}
    for entry in _entries(path):
        message = entry.get("message")
        if entry.get("type") != "assistant" or not isinstance(message, dict):
            continue
        usage = message.get("usage")
        if not isinstance(usage, dict) or message.get("model") == SYNTHETIC:
            continue
        key = str(message.get("id") or entry.get("uuid") or len(by_message))
        seen = by_message.get(key, Usage())
        by_message[key] = Usage(
            max(seen.input_tokens, _count(usage.get("input_tokens"))),
            max(seen.output_tokens, _count(usage.get("output_tokens"))),
            max(seen.cache_read_tokens, _count(usage.get("cache_read_input_tokens"))),
            max(seen.cache_write_tokens, _count(usage.get("cache_creation_input_tokens"))),
        )
    if not by_message:
        return None
    return Usage(
        sum(u.input_tokens for u in by_message.values()),
        sum(u.output_tokens for u in by_message.values()),
        sum(u.cache_read_tokens for u in by_message.values()),
        sum(u.cache_write_tokens for u in by_message.values()),
    )


def codex_usage(path: Path) -> Usage | None:
    """The rollout's last running total; its input counts the cached tokens, which are priced
    apart (as ``executors.codex_protocol`` does)."""
    total: dict[str, Any] | None = None
    for entry in _entries(path):
        payload = entry.get("payload")
        if entry.get("type") != "event_msg" or not isinstance(payload, dict):
            continue
        info = payload.get("info")
        if payload.get("type") == "token_count" and isinstance(info, dict):
            found = info.get("total_token_usage")
            total = found if isinstance(found, dict) else total
    if total is None:
        return None
    cached = _count(total.get("cached_input_tokens"))
    return Usage(
        input_tokens=max(0, _count(total.get("input_tokens")) - cached),
        output_tokens=_count(total.get("output_tokens")),
        cache_read_tokens=cached,
    )


def _entries(path: Path) -> Iterator[dict[str, Any]]:
    """The file's JSON objects, one a line; none when it is not a regular file or too big
    (a file still growing is read up to ``USAGE_BYTES``)."""
    try:  # never a FIFO or a device planted under that name: it could block this thread
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > USAGE_BYTES:
            return
        read = 0
        while read < USAGE_BYTES and (line := file.readline(LINE_BYTES)):
            read += len(line)
            if not line.endswith(b"\n") and len(line) == LINE_BYTES:
                while (rest := file.readline(LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass  # the rest of an overlong line: skipped
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict):
                yield entry


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
