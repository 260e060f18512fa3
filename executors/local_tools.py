"""The local engine's tools: read, write and edit a file, list and grep files, run a command.

Every path is confined to the task's directory (executors/local_files.py: ``..``, an absolute
path elsewhere and a symlink that leads out are refused, and skipped by list and grep; writes
into ``.git`` are refused). The file work runs in a worker thread, never on the event loop;
grep's pattern runs in RE2 (linear time). Numbers are bounded (a clear error, never an
exception). Writes and commands are the engine's to approve (executors/local.py) before
``ToolBox.run`` is called. Output is capped and the cap is said in the output, so the model
knows it saw only part.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from executors.local_files import Confined, ToolFailed

OUTPUT_CAP = 16_000  # characters of one tool result the model gets
WRITES = {"write_file", "edit_file"}
LINE_MAX = 10**9  # offset and limit beyond this are refused
TIMEOUT_MAX_S = 7 * 24 * 3600.0  # a longer timeout_s is refused (the engine's own cap applies)

RunCommand = Callable[[str, float | None], Awaitable[tuple[int | None, str]]]


def _function(name: str, description: str, properties: dict[str, Any], required: list[str]) -> Any:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


_PATH = {"type": "string", "description": "a path relative to the working directory"}
SCHEMAS = [
    _function(
        "read_file",
        "Read a text file. Long files: give offset (first line, from 1) and limit (lines).",
        {"path": _PATH, "offset": {"type": "integer"}, "limit": {"type": "integer"}},
        ["path"],
    ),
    _function(
        "write_file",
        "Create or overwrite a file with the given content (needs the owner's approval).",
        {"path": _PATH, "content": {"type": "string"}},
        ["path", "content"],
    ),
    _function(
        "edit_file",
        "Replace old_text, which must occur exactly once in the file, with new_text (needs the "
        "owner's approval).",
        {"path": _PATH, "old_text": {"type": "string"}, "new_text": {"type": "string"}},
        ["path", "old_text", "new_text"],
    ),
    _function(
        "list_files",
        "List files under the working directory matching a glob pattern (default: all).",
        {"pattern": {"type": "string", "description": "e.g. **/*.py"}},
        [],
    ),
    _function(
        "grep",
        "Search files for a regular expression; returns path:line: text for each match.",
        {
            "pattern": {"type": "string"},
            "path": {"type": "string", "description": "a file or directory (default: all)"},
        },
        ["pattern"],
    ),
    _function(
        "run",
        "Run a shell command in the working directory and return its exit code and output "
        "(needs the owner's approval unless the task is sandboxed).",
        {"command": {"type": "string"}, "timeout_s": {"type": "number"}},
        ["command"],
    ),
]
NAMES = {schema["function"]["name"] for schema in SCHEMAS}


def capped(text: str, cap: int = OUTPUT_CAP) -> str:
    """``text``, cut to ``cap`` characters (its start and its end) with the cut said."""
    if len(text) <= cap:
        return text
    head, tail = text[: cap // 2], text[-cap // 2 :]
    return (
        f"{head}\n[... output cut: {len(text) - len(head) - len(tail)} of {len(text)} "
        f"characters left out to fit the tool output cap of {cap} ...]\n{tail}"
    )


@dataclass(frozen=True, slots=True)
class Call:
    """One tool call the model asked for, its arguments parsed."""

    id: str
    name: str
    args: dict[str, Any]

    def summary(self) -> str:
        main = self.args.get("command") or self.args.get("path") or self.args.get("pattern")
        return f"{self.name} {main}" if main else self.name


def parse_call(call_id: str, name: str, raw: str, more: frozenset[str] = frozenset()) -> Call:
    """A Call, or ToolFailed saying what is wrong with the model's arguments; ``more``: the
    names of the turn's other tools (its MCP servers')."""
    if name not in NAMES | more:
        known = ", ".join(sorted(NAMES | more))
        raise ToolFailed(f"there is no tool {name!r}; the tools are: {known}")
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ToolFailed(f"the arguments of {name} are not valid JSON ({exc.msg})") from exc
    except (ValueError, RecursionError) as exc:  # a number of 5,000 digits; nesting too deep
        raise ToolFailed(f"the arguments of {name} cannot be read ({exc})"[:300]) from exc
    if not isinstance(args, dict):
        raise ToolFailed(f"the arguments of {name} must be a JSON object")
    return Call(call_id, name, args)


class ToolBox:
    """The tools of one turn, rooted at the task's directory."""

    def __init__(self, root: Path, run_command: RunCommand, denied: Iterable[Path] = ()) -> None:
        """``denied``: paths no tool reads or writes (the turn's deny list; what lies inside
        the directory counts, e.g. ``~/.ssh`` for a task working in the home directory)."""
        self.files = Confined(root, denied)
        self.root = self.files.root
        self._run_command = run_command

    def inside(self, path: object) -> Path:
        """``path`` resolved inside the task's directory, or ToolFailed."""
        return self.files.inside(path)

    def writable(self, path: object) -> Path:
        """``inside``, and not in ``.git``; or ToolFailed."""
        return self.files.writable(path)

    def relative(self, path: Path) -> str:
        return self.files.relative(path)

    async def run(self, call: Call) -> str:
        """The tool's result for the model; ToolFailed for a call that cannot be done."""
        if call.name == "run":
            timeout = _number(call.args, "timeout_s", 1.0, TIMEOUT_MAX_S)
            code, output = await self._run_command(_text(call.args, "command"), timeout)
            status = "timed out" if code is None else f"exit code {code}"
            return capped(f"[{status}]\n{output}")
        return capped(await asyncio.to_thread(self._files_tool, call))

    def _files_tool(self, call: Call) -> str:
        """A tool that works on files: blocking, so run in a worker thread."""
        args, files = call.args, self.files
        match call.name:
            case "read_file":
                first = _number(args, "offset", 1, LINE_MAX)
                count = _number(args, "limit", 1, LINE_MAX)
                return files.read(files.inside(args.get("path")), int(first or 1), _int(count))
            case "write_file":
                return files.write(files.writable(args.get("path")), _text(args, "content"))
            case "edit_file":
                path = files.writable(args.get("path"))
                return files.edit(path, _text(args, "old_text"), _text(args, "new_text"))
            case "list_files":
                return files.list(str(args.get("pattern") or "**/*"))
            case "grep":
                where = files.inside(args["path"]) if args.get("path") else files.root
                return files.grep(_text(args, "pattern"), where)
        raise ToolFailed(f"there is no tool {call.name!r}")


def _number(args: dict[str, Any], key: str, low: float, high: float) -> float | None:
    """An optional number argument: None when absent; ToolFailed unless it is a number (or a
    numeric string) from ``low`` to ``high`` (NaN, infinities and 400-digit integers are not:
    an int compares with a float exactly, without converting)."""
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise ToolFailed(f"{key} must be a number from {low:g} to {high:g}")
    return float(value)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


def _text(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise ToolFailed(f"{key} must be a string")
    return value


def allowed(patterns: Sequence[str], tool: str, detail: str) -> bool:
    """Whether a grant or an allowed-tools entry covers this call: ``Bash`` (every command),
    ``Bash(git status)`` (exactly), ``Bash(npm test:*)`` (a prefix), ``Edit``, ``Edit(src/a.py)``;
    ``Edit`` also covers writes, as Claude Code's acceptEdits does."""
    tools = {tool, "Edit"} if tool == "Write" else {tool}
    for pattern in patterns:
        if pattern in tools or pattern == f"{tool}({detail})":
            return True
        prefix = re.fullmatch(r"(\w+)\((.*):\*\)", pattern)
        if prefix and prefix[1] in tools and detail.startswith(prefix[2]):
            return True
    return False
