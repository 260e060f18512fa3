"""The diff of a task in a plain checkout (no worktree of its own): the checkout's uncommitted
changes against its HEAD, new files included, whoever made them. The turn's baseline
(``bot.turns.baseline``) lives only while the turn runs and is recorded nowhere, so "since the
task started" cannot be told apart from the owner's own edits: the page says so.

Git runs only through ``executors.gitguard`` (via ``bot.turns.gitinfo``: the repository's
hooks, fsmonitor, drivers and external diff/textconv neutralised, bounded). New files are read
by the bot itself, not by git: regular files only, opened without following a link and without
blocking, at most ``NEW_FILE_BYTES`` each."""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from bot.turns.gitinfo import in_repository, output, scoped
from executors.gitguard import PLAIN_DIFF

MAX_NEW_FILES = 50
NEW_FILE_BYTES = 64 * 1024
MAX_PATCH_CHARS = 2_000_000


async def checkout_patch(cwd: str) -> str | None:
    """``git diff HEAD`` of the checkout holding ``cwd`` (paths from its top), then each new
    file (untracked, not ignored) as a ``new file`` patch; None when ``cwd`` is in no
    repository git would run in."""
    if not in_repository(cwd):
        return None
    within = await scoped(cwd)
    if within is None:
        return None
    top, tracked, untracked = await asyncio.gather(
        output(cwd, within, "rev-parse", "--show-toplevel"),
        output(cwd, within, "diff", "HEAD", *PLAIN_DIFF, "--no-relative", "--no-renames"),
        output(cwd, within, "ls-files", "--others", "--exclude-standard", "--full-name", "-z"),
    )
    if not top:
        return None
    names = [name for name in untracked.split("\0") if name][:MAX_NEW_FILES]
    new = await asyncio.to_thread(_new_files, Path(top), names)
    patch = "\n".join(part.rstrip("\n") for part in (tracked, *new) if part)
    return patch[:MAX_PATCH_CHARS]


def _new_files(top: Path, names: list[str]) -> list[str]:
    return [_new_file(top, name) for name in names]


def _new_file(top: Path, name: str) -> str:
    """A new file as git would show it (binary, special and unreadable ones by name only)."""
    head = f"diff --git a/{name} b/{name}\nnew file mode 100644\n"
    text = _read(top / name)
    if text is None:
        return head + f"Binary or unreadable file b/{name}\n"
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    return head + f"--- /dev/null\n+++ b/{name}\n@@ -0,0 +1,{len(lines)} @@\n" + body


def _read(path: Path) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return None
        data = file.read(NEW_FILE_BYTES + 1)
    if b"\0" in data:
        return None
    text = data[:NEW_FILE_BYTES].decode("utf-8", errors="replace")
    return text + ("\n… cut" if len(data) > NEW_FILE_BYTES else "")
