"""The local engine's tools: read, write and edit a file, list and grep files, run a command.

Every path is confined to the task's directory: a relative path is taken from it; ``..``, an
absolute path elsewhere and a symlink that leads out are refused. Writes and commands are the
engine's to approve (executors/local.py) before ``ToolBox.run`` is called. Output is capped and
the cap is said in the output, so the model knows it saw only part.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

OUTPUT_CAP = 16_000  # characters of one tool result the model gets
READ_CAP = 200_000  # bytes of a file read at most
LIST_CAP = 500  # paths one listing returns
GREP_CAP = 200  # matching lines one search returns
SKIPPED_DIRS = {".git", ".detach", "node_modules", "__pycache__", ".venv"}
WRITES = {"write_file", "edit_file"}

RunCommand = Callable[[str, float | None], Awaitable[tuple[int | None, str]]]


class ToolFailed(Exception):
    """A tool call that could not be done; its message goes back to the model."""


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


def parse_call(call_id: str, name: str, raw: str) -> Call:
    """A Call, or ToolFailed saying what is wrong with the model's arguments."""
    if name not in NAMES:
        raise ToolFailed(f"there is no tool {name!r}; the tools are: {', '.join(sorted(NAMES))}")
    try:
        args = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ToolFailed(f"the arguments of {name} are not valid JSON ({exc.msg})") from exc
    if not isinstance(args, dict):
        raise ToolFailed(f"the arguments of {name} must be a JSON object")
    return Call(call_id, name, args)


class ToolBox:
    """The tools of one turn, rooted at the task's directory."""

    def __init__(self, root: Path, run_command: RunCommand) -> None:
        self.root = root.resolve()
        self._run_command = run_command

    def inside(self, path: object) -> Path:
        """``path`` resolved inside the task's directory, or ToolFailed."""
        if not isinstance(path, str) or not path.strip():
            raise ToolFailed("a path is needed")
        resolved = (self.root / path).resolve()
        if resolved != self.root and not resolved.is_relative_to(self.root):
            raise ToolFailed(f"{path} is outside the working directory; it is not allowed")
        return resolved

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root)) if path != self.root else "."

    async def run(self, call: Call) -> str:
        """The tool's result for the model; ToolFailed for a call that cannot be done."""
        args = call.args
        match call.name:
            case "read_file":
                path = self.inside(args.get("path"))
                return self._read(path, args.get("offset"), args.get("limit"))
            case "write_file":
                return self._write(self.inside(args.get("path")), _text(args, "content"))
            case "edit_file":
                return self._edit(
                    self.inside(args.get("path")), _text(args, "old_text"), _text(args, "new_text")
                )
            case "list_files":
                return self._list(str(args.get("pattern") or "**/*"))
            case "grep":
                where = self.inside(args["path"]) if args.get("path") else self.root
                return self._grep(_text(args, "pattern"), where)
            case "run":
                timeout = args.get("timeout_s")
                limit = float(timeout) if isinstance(timeout, int | float) else None
                code, output = await self._run_command(_text(args, "command"), limit)
                status = "timed out" if code is None else f"exit code {code}"
                return capped(f"[{status}]\n{output}")
        raise ToolFailed(f"there is no tool {call.name!r}")

    def _read(self, path: Path, offset: object, limit: object) -> str:
        if not path.is_file():
            raise ToolFailed(f"{self.relative(path)} is not a file")
        with path.open("rb") as handle:
            data = handle.read(READ_CAP + 1)
        text = data[:READ_CAP].decode("utf-8", errors="replace")
        lines = text.splitlines()
        first = max(int(offset), 1) if isinstance(offset, int) else 1
        count = max(int(limit), 1) if isinstance(limit, int) else len(lines)
        chosen = "\n".join(lines[first - 1 : first - 1 + count])
        if len(data) > READ_CAP:
            chosen += f"\n[file longer than {READ_CAP} bytes: read the rest with offset]"
        return capped(chosen)

    def _write(self, path: Path, content: str) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8")
        return f"wrote {self.relative(path)} ({len(content)} characters)"

    def _edit(self, path: Path, old: str, new: str) -> str:
        if not path.is_file():
            raise ToolFailed(f"{self.relative(path)} is not a file")
        text = path.read_text(encoding="utf-8", errors="replace")
        found = text.count(old) if old else 0
        if found != 1:
            where = "does not occur" if found == 0 else f"occurs {found} times"
            raise ToolFailed(f"old_text {where} in {self.relative(path)}; it must occur once")
        path.write_text(text.replace(old, new, 1), encoding="utf-8")
        return f"edited {self.relative(path)}"

    def _files(self, under: Path) -> list[Path]:
        if under.is_file():
            return [under]
        found: list[Path] = []
        for folder, dirs, files in os.walk(under):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
            found.extend(Path(folder) / name for name in sorted(files))
        return found

    def _list(self, pattern: str) -> str:
        names = [self.relative(p) for p in self._files(self.root)]
        bare = pattern.removeprefix("**/")  # "**/*.py" also matches a top-level a.py
        matched = [n for n in names if fnmatch.fnmatch(n, pattern) or fnmatch.fnmatch(n, bare)]
        listing = "\n".join(matched[:LIST_CAP]) or "(no files)"
        if len(matched) > LIST_CAP:
            listing += f"\n[{len(matched) - LIST_CAP} more files not listed: narrow the pattern]"
        return capped(listing)

    def _grep(self, pattern: str, where: Path) -> str:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            raise ToolFailed(f"not a valid regular expression: {exc}") from exc
        hits: list[str] = []
        for path in self._files(where):
            try:
                with path.open(encoding="utf-8", errors="strict") as handle:
                    for number, line in enumerate(handle, start=1):
                        if regex.search(line):
                            hits.append(f"{self.relative(path)}:{number}: {line.rstrip()[:300]}")
                            if len(hits) > GREP_CAP:
                                break
            except (UnicodeDecodeError, OSError):
                continue  # binary or unreadable: not searched
            if len(hits) > GREP_CAP:
                hits = hits[:GREP_CAP] + [f"[more than {GREP_CAP} matches: narrow the search]"]
                break
        return capped("\n".join(hits) or "(no matches)")


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
