"""The local engine's file work, confined to the task's directory. Blocking by design: the
``ToolBox`` runs each call in a worker thread, never on the event loop.

Confinement: a path is resolved (symlinks followed) and refused unless it stays inside the
directory; the file is then opened without following a last symlink and checked again through
its open descriptor, so a link swapped in between leads nowhere. ``list_files`` and ``grep`` skip
a symlink whose target is outside (never read). Only regular files are read or written (a FIFO
would block). Writes into a ``.git`` (a directory or a worktree's file) are refused, as Claude
Code's sandbox does: a planted hook or config would be run by git, the bot's own included.
The turn's denied paths (``TurnSpec.deny_read``) that lie inside the directory (a task working
in the home directory holds ``~/.ssh``) are outside for every tool: not read, written, listed
or searched.
``grep`` uses RE2 (linear time: no pattern can hang it) within a time budget.
"""

from __future__ import annotations

import fnmatch
import os
import stat
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bot.errors import DetachError

READ_CAP = 200_000  # bytes of a file read at most
EDIT_CAP = 10_000_000  # bytes of a file edit_file rewrites at most
GREP_FILE_CAP = 5_000_000  # bytes of one file grep searches at most
LIST_CAP = 500  # paths one listing returns
GREP_CAP = 200  # matching lines one search returns
WALK_BUDGET_S = 10.0  # a listing or a search stops (and says so) after this long
SKIPPED_DIRS = {".git", ".detach", "node_modules", "__pycache__", ".venv"}
PROTECTED = ".git"
# what Claude Code obeys in a directory (hooks, permission rules, MCP servers)
CLAUDE_CONFIG = (".claude", ".mcp.json")


class ToolFailed(DetachError):
    """A tool call that could not be done; its message goes back to the model."""


class Confined:
    """The files of one task's directory, as the tools may touch them."""

    def __init__(self, root: Path, denied: Iterable[Path] = ()) -> None:
        self.root = root.resolve()
        self._denied = tuple(
            path
            for path in (Path(p).resolve() for p in denied)
            if path != self.root and path.is_relative_to(self.root)
        )

    def inside(self, path: object) -> Path:
        """``path`` resolved inside the task's directory, or ToolFailed."""
        if not isinstance(path, str) or not path.strip():
            raise ToolFailed("a path is needed")
        try:
            resolved = (self.root / path).resolve()
        except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL byte
            raise ToolFailed(f"{path} cannot be resolved: {exc}") from exc
        if not self._contains(resolved):
            where = (
                "is denied to tasks (it may hold secrets)"
                if self._within_root(resolved)
                else "is outside the working directory"
            )
            raise ToolFailed(f"{path} {where}; it is not allowed")
        return resolved

    def writable(self, path: object) -> Path:
        """``inside``, and not in a ``.git``, a ``.claude`` or a ``.mcp.json`` (as written, or
        once its links are followed)."""
        resolved = self.inside(path)
        named = Path(str(path)).parts + Path(self.relative(resolved)).parts
        if any(part.lower() == PROTECTED for part in named):
            raise ToolFailed(
                f"{path} is in .git, the repository's own data; the tools do not write there "
                "(git commands through run may change a repository)"
            )
        if any(part.lower() in CLAUDE_CONFIG for part in named):
            raise ToolFailed(
                f"{path} is Claude Code's project configuration (hooks, permission rules); "
                "the tools do not write there"
            )
        return resolved

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root)) if path != self.root else "."

    def _within_root(self, path: Path) -> bool:
        return path == self.root or path.is_relative_to(self.root)

    def _contains(self, path: Path) -> bool:
        """Inside the directory and under none of its denied paths (``path`` resolved)."""
        return self._within_root(path) and not any(
            path == d or path.is_relative_to(d) for d in self._denied
        )

    # -- opening ---------------------------------------------------------------------------
    def _open(self, path: Path, flags: int) -> int:
        """A descriptor of the regular file ``path`` leads to, checked to be inside."""
        path = path.resolve()
        if not self._contains(path):
            raise ToolFailed(f"{path.name} leads outside the working directory")
        try:
            fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            raise ToolFailed(f"{self.relative(path)} cannot be opened: {exc.strerror}") from exc
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ToolFailed(f"{self.relative(path)} is not a regular file")
            if not self._contains(Path(os.readlink(f"/proc/self/fd/{fd}"))):
                raise ToolFailed(f"{self.relative(path)} leads outside the working directory")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _read_bytes(self, path: Path, cap: int) -> bytes:
        with os.fdopen(self._open(path, os.O_RDONLY), "rb") as handle:
            return handle.read(cap)

    def _write_text(self, path: Path, text: str) -> None:
        with os.fdopen(self._open(path, os.O_WRONLY | os.O_CREAT), "wb") as handle:
            handle.truncate(0)
            handle.write(text.encode("utf-8"))

    # -- the tools ---------------------------------------------------------------------------
    def read(self, path: Path, first: int, count: int | None) -> str:
        data = self._read_bytes(path, READ_CAP + 1)
        lines = data[:READ_CAP].decode("utf-8", errors="replace").splitlines()
        chosen = "\n".join(lines[first - 1 : None if count is None else first - 1 + count])
        if len(data) > READ_CAP:
            chosen += f"\n[file longer than {READ_CAP} bytes: read the rest with offset]"
        return chosen

    def write(self, path: Path, content: str) -> str:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.writable(self.relative(path))  # the directories just made may not lead elsewhere
        self._write_text(path, content)
        return f"wrote {self.relative(path)} ({len(content)} characters)"

    def edit(self, path: Path, old: str, new: str) -> str:
        data = self._read_bytes(path, EDIT_CAP + 1)
        if len(data) > EDIT_CAP:
            raise ToolFailed(f"{self.relative(path)} is longer than {EDIT_CAP} bytes; not edited")
        text = data.decode("utf-8", errors="replace")
        found = text.count(old) if old else 0
        if found != 1:
            where = "does not occur" if found == 0 else f"occurs {found} times"
            raise ToolFailed(f"old_text {where} in {self.relative(path)}; it must occur once")
        self._write_text(path, text.replace(old, new, 1))
        return f"edited {self.relative(path)}"

    def list(self, pattern: str) -> str:
        bare = pattern.removeprefix("**/")  # "**/*.py" also matches a top-level a.py
        deadline = time.monotonic() + WALK_BUDGET_S
        matched = [
            name
            for name in map(self.relative, self._files(self.root, deadline))
            if fnmatch.fnmatch(name, pattern) or fnmatch.fnmatch(name, bare)
        ]
        listing = "\n".join(matched[:LIST_CAP]) or "(no files)"
        if len(matched) > LIST_CAP:
            listing += f"\n[{len(matched) - LIST_CAP} more files not listed: narrow the pattern]"
        if time.monotonic() > deadline:
            listing += f"\n[stopped after {WALK_BUDGET_S:.0f} s: narrow the pattern]"
        return listing

    def grep(self, pattern: str, where: Path) -> str:
        regex = _compile(pattern)
        deadline = time.monotonic() + WALK_BUDGET_S
        hits: list[str] = []
        for path in self._files(where, deadline):
            try:
                text = self._read_bytes(path, GREP_FILE_CAP).decode("utf-8", errors="strict")
            except (ToolFailed, UnicodeDecodeError, OSError):
                continue  # binary, unreadable or leading out: not searched
            for number, line in enumerate(text.splitlines(), start=1):
                if regex.search(line):
                    hits.append(f"{self.relative(path)}:{number}: {line.rstrip()[:300]}")
                    if len(hits) > GREP_CAP:
                        hits[GREP_CAP:] = [f"[more than {GREP_CAP} matches: narrow the search]"]
                        return "\n".join(hits)
        if time.monotonic() > deadline:
            hits.append(f"[stopped after {WALK_BUDGET_S:.0f} s: narrow the search]")
        return "\n".join(hits) or "(no matches)"

    def _files(self, under: Path, deadline: float) -> Iterator[Path]:
        """The files under ``under`` (or ``under`` itself), sorted, skipping the usual heavy
        directories and any symlink whose target is outside; until the deadline."""
        if not under.is_dir():
            yield under
            return
        for folder, dirs, files in os.walk(under):
            dirs[:] = sorted(
                d
                for d in dirs
                if d not in SKIPPED_DIRS and self._contains((Path(folder) / d).resolve())
            )
            for name in sorted(files):
                if time.monotonic() > deadline:
                    return
                path = Path(folder) / name
                if self._contains(path.resolve() if path.is_symlink() else path):
                    yield path


def _compile(pattern: str) -> Any:
    import re2  # google-re2: loaded with the first search

    options = re2.Options()
    options.log_errors = False  # the model is told; the bot's log is not the place
    options.max_mem = 64 << 20
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args else str(exc)
        raise ToolFailed(
            f"not a valid regular expression ({detail}); grep uses RE2 syntax: no look-around "
            "or back-references"
        ) from exc
