"""Sessions the agent CLIs keep on this machine, found by id for ``/adopt``: Claude Code's
``$CLAUDE_CONFIG_DIR`` (else ``~/.claude``) ``/projects/<cwd, each non-alphanumeric character
as ->/<id>.jsonl`` and Codex's ``$CODEX_HOME`` (else ``~/.codex``)
``/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``.

The files are the agent's and may hold anything: the id must be a UUID (it becomes a path
part and a CLI argument), every file is read bounded (its head for the directory and the first
prompt, its tail for the last answer), lines that are not the expected JSON are skipped, and a
Claude session whose stated directory does not name its project folder is marked
inconsistent (``FoundSession.consistent``) for the caller to refuse."""

from __future__ import annotations

import json
import os
import re
import stat
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.events import Usage
from executors.session_usage import claude_usage, codex_usage

HEAD_BYTES = 256 * 1024  # read for the directory and the first prompt
TAIL_BYTES = 256 * 1024  # read for the last answer
MAX_ROLLOUTS = 20_000  # Codex rollout files looked at, at most
MODEL_CHARS = 100  # a model name from a session file: hostile input, kept short


@dataclass(frozen=True, slots=True)
class FoundSession:
    """A session file of ``engine`` on this machine, as far as it could be read."""

    engine: str
    session_id: str
    path: Path
    cwd: str
    first_prompt: str
    last_answer: str
    # the directory the file states is the one it is kept under (Claude: its project folder);
    # False: a file that claims another directory than its place, not to be trusted
    consistent: bool = True
    model: str = ""  # the model its last answer came from, as the file names it ("": unknown)
    usage: Usage | None = None  # the tokens its model messages used (None: unknown)


def valid_id(typed: str) -> str | None:
    """The canonical form of a session id (a UUID, any version), or None."""
    text = typed.strip()
    try:
        parsed = uuid.UUID(text)
    except ValueError:
        return None
    return str(parsed) if str(parsed) == text.lower() else None


def find_session(environ: Mapping[str, str], session_id: str) -> FoundSession | None:
    """The Claude session, else the Codex thread, with this (valid) id; None: neither here."""
    return find_claude(environ, session_id) or find_codex(environ, session_id)


def claude_dir_name(cwd: str) -> str:
    """The project folder Claude Code 2.1.197 keeps a directory's sessions in."""
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def find_claude(environ: Mapping[str, str], session_id: str) -> FoundSession | None:
    home = Path(environ.get("HOME") or Path.home())
    projects = Path(environ.get("CLAUDE_CONFIG_DIR") or home / ".claude") / "projects"
    try:
        folders = [p for p in projects.iterdir() if p.is_dir()]
    except OSError:
        return None
    for folder in folders:
        path = folder / f"{session_id}.jsonl"
        if not path.is_file():
            continue
        cwd, first = _claude_head(path)
        if cwd is None or claude_dir_name(cwd) != folder.name:
            return FoundSession("claude", session_id, path, cwd or "", "", "", consistent=False)
        last, model = _claude_last(path)
        usage = claude_usage(path)
        return FoundSession("claude", session_id, path, cwd, first, last, model=model, usage=usage)
    return None


def _claude_head(path: Path) -> tuple[str | None, str]:
    cwd, first = None, ""
    for entry in _lines(path, head=True):
        if cwd is None and isinstance(entry.get("cwd"), str):
            cwd = entry["cwd"]
        if not first and entry.get("type") == "user":
            first = _text((entry.get("message") or {}).get("content"))
        if cwd is not None and first:
            break
    return cwd, first


def _claude_last(path: Path) -> tuple[str, str]:
    """The last answer's words, and the model that gave it."""
    last, model = "", ""
    for entry in _lines(path, head=False):
        if entry.get("type") == "assistant":
            message = entry.get("message") or {}
            last = _text(message.get("content")) or last
            model = _model(message) or model
    return last, model


def find_codex(environ: Mapping[str, str], session_id: str) -> FoundSession | None:
    home = Path(environ.get("HOME") or Path.home())
    sessions = Path(environ.get("CODEX_HOME") or home / ".codex") / "sessions"
    for path in _rollouts(sessions, session_id):
        cwd, first = None, ""
        for entry in _lines(path, head=True):
            payload = _payload(entry)
            if entry.get("type") == "session_meta" and payload.get("id") == session_id:
                cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else None
            if not first and _codex_message(payload, "user"):
                first = _codex_message(payload, "user")
        if cwd is None:
            return None
        last, model = "", ""
        for entry in _lines(path, head=False):
            last = _codex_message(_payload(entry), "assistant") or last
            if entry.get("type") == "turn_context":
                model = _model(_payload(entry)) or model
        usage = codex_usage(path)
        return FoundSession("codex", session_id, path, cwd, first, last, model=model, usage=usage)
    return None


def _rollouts(sessions: Path, session_id: str) -> Iterator[Path]:
    """``sessions/YYYY/MM/DD/rollout-*-<id>.jsonl``, walked without following links."""
    suffix = f"-{session_id}.jsonl"
    seen = 0
    for root, dirs, files in os.walk(sessions):
        dirs.sort()
        for name in files:
            seen += 1
            if seen > MAX_ROLLOUTS:
                return
            if name.startswith("rollout-") and name.endswith(suffix):
                yield Path(root) / name


def _payload(entry: dict[str, Any]) -> dict[str, Any]:
    payload = entry.get("payload")
    return payload if isinstance(payload, dict) else {}


def _codex_message(payload: dict[str, Any], role: str) -> str:
    if payload.get("type") != "message" or payload.get("role") != role:
        return ""
    text = _text(payload.get("content"))
    return "" if text.lstrip().startswith("<") else text  # instructions and context, not words


def _lines(path: Path, head: bool) -> Iterator[dict[str, Any]]:
    """The JSON objects of the file's head (or tail), at most ``HEAD_BYTES``/``TAIL_BYTES``."""
    try:  # never a FIFO or a device planted under that name: it could block this thread
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as file:
            if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
                return
            if head:
                data = file.read(HEAD_BYTES)
            else:
                size = file.seek(0, os.SEEK_END)
                file.seek(max(0, size - TAIL_BYTES))
                data = file.read(TAIL_BYTES)
    except OSError:
        return
    lines = data.decode("utf-8", "replace").splitlines()
    if not head and len(data) == TAIL_BYTES:
        lines = lines[1:]  # the first may be cut
    for line in lines:  # each within the bounded read
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            yield entry


def _model(data: dict[str, Any]) -> str:
    model = data.get("model")
    return model[:MODEL_CHARS] if isinstance(model, str) else ""


def _text(content: Any) -> str:
    """The words of a message's content: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [
        str(block.get("text", ""))
        for block in content
        if isinstance(block, dict) and block.get("type") in ("text", "input_text", "output_text")
    ]
    return "\n".join(p for p in parts if p)
