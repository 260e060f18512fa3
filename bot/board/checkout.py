"""The diff of a task in a plain checkout (no worktree of its own). Where its first turn's
baseline is recorded (``bot.turns.baseline.recorded``, in the transcript): the files changed
since then, committed or not, diffed against the commit the task started at, new files
included, and not the files the owner had edited before and the task left alone; those it
changed further against their content then (recorded with the baseline, bounded: see
``bot.turns.baseline.recorded``), and the owner's new files it deleted. Without one
(a task older than the record, or one whose checkout moved): the checkout's uncommitted changes
against its HEAD, whoever made them: the page says so.

Git runs only through ``executors.gitguard`` (via ``bot.turns.gitinfo``: the repository's
hooks, fsmonitor, drivers and external diff/textconv neutralised, bounded). New files are read
by the bot itself, not by git: regular files only, opened without following a link and without
blocking, at most ``NEW_FILE_BYTES`` each."""

from __future__ import annotations

import asyncio
import difflib
import re
from pathlib import Path

from bot.git.repository import in_repository
from bot.turns.baseline import Baseline, take
from bot.turns.gitinfo import output, scoped
from executors.gitguard import GitGuard
from executors.gitscope import PLAIN_DIFF
from executors.reading import read_regular

MAX_NEW_FILES = 50
NEW_FILE_BYTES = 64 * 1024
MAX_PATCH_CHARS = 2_000_000
MAX_PATHS = 500  # files named to git at most
TOP = ("--no-relative", "--no-renames")  # paths from the top, whatever the repository says


async def checkout_patch(guard: GitGuard, cwd: str) -> str | None:
    """``git diff HEAD`` of the checkout holding ``cwd`` (paths from its top), then each new
    file (untracked, not ignored) as a ``new file`` patch; None when ``cwd`` is in no
    repository git would run in."""
    if not await in_repository(Path(cwd)):
        return None
    within = await scoped(guard, cwd)
    if within is None:
        return None
    top, tracked, untracked = await asyncio.gather(
        output(cwd, within, "rev-parse", "--show-toplevel"),
        output(cwd, within, "diff", "HEAD", *PLAIN_DIFF, *TOP),
        output(cwd, within, "ls-files", "--others", "--exclude-standard", "--full-name", "-z"),
    )
    if not top:
        return None
    names = [name for name in untracked.split("\0") if name][:MAX_NEW_FILES]
    new = await asyncio.to_thread(_new_files, Path(top), names)
    patch = "\n".join(part.rstrip("\n") for part in (tracked, *new) if part)
    return patch[:MAX_PATCH_CHARS]


async def patch_since(guard: GitGuard, cwd: str, before: Baseline) -> str | None:
    """What changed in the checkout holding ``cwd`` since ``before``, as a patch from the top;
    None when it is no longer the same repository (then ``checkout_patch`` is all there is).
    A file the owner had already edited (its content in ``before.texts``) is diffed against
    that content, not the commit: the task's change only; a new file of the owner's that the
    task deleted shows as deleted."""
    after = await take(guard, cwd)
    within = await scoped(guard, cwd) if after.top is not None else None
    if within is None or after.top is None or after.top != before.top:
        return None
    top = after.top
    base = before.head or await output(top, within, "hash-object", "-t", "tree", "--stdin")
    committed: set[str] = set()
    if after.head is not None and after.head != before.head:
        names = await output(top, within, "diff", *PLAIN_DIFF, *TOP, "--name-only", "-z", base)
        committed = {name for name in names.split("\0") if name}
    touched = {p for p, sig in after.dirty.items() if before.dirty.get(p) != sig}
    undone = {p for p in before.dirty if p not in after.dirty}
    paths = sorted(committed | touched | undone)
    had = [p for p in paths if p in before.texts]
    gone = [p for p in paths if p in before.untracked and p not in before.texts]
    gone = [p for p in gone if p not in after.dirty and p not in committed]
    rest = [p for p in paths if p not in before.texts and p not in gone]
    new = [p for p in rest if p in after.untracked][:MAX_NEW_FILES]
    tracked = [p for p in rest if p not in after.untracked][:MAX_PATHS]
    diff = ""
    if tracked:
        args = ("diff", *PLAIN_DIFF, *TOP, base, "--", *tracked)
        diff = await output(top, within, "--literal-pathspecs", *args)
    root = Path(top)
    added = await asyncio.to_thread(_new_files, root, new)
    edited = await asyncio.to_thread(_since_texts, root, had[:MAX_PATHS], before.texts)
    deleted = [_deleted(name, None) for name in gone[:MAX_NEW_FILES]]
    parts = sorted((*_by_file(diff), *added, *edited, *deleted), key=_path_of)
    return "\n".join(part.rstrip("\n") for part in parts if part)[:MAX_PATCH_CHARS]


def _by_file(patch: str) -> list[str]:
    return [c for c in re.split(r"(?m)^(?=diff --git )", patch) if c.startswith("diff --git ")]


def _path_of(part: str) -> str:
    return part.split("\n", 1)[0].rsplit(" b/", 1)[-1]


def _since_texts(top: Path, names: list[str], texts: dict[str, str]) -> list[str]:
    """Each file against the content it had when the task started (the owner's edits
    included): changed, deleted, or nothing when it is as it was."""
    parts = []
    for name in names:
        was = texts[name]
        if not (top / name).exists() and not (top / name).is_symlink():
            parts.append(_deleted(name, was))
            continue
        now = _read(top / name)
        if now is None:
            parts.append(f"diff --git a/{name} b/{name}\nBinary or unreadable file b/{name}\n")
        elif now != was:
            lines = difflib.unified_diff(
                was.splitlines(), now.splitlines(), f"a/{name}", f"b/{name}", lineterm=""
            )
            parts.append(f"diff --git a/{name} b/{name}\n" + "\n".join(lines) + "\n")
    return parts


def _deleted(name: str, was: str | None) -> str:
    """A deleted file as git would show it (by name only when its content is unknown)."""
    head = f"diff --git a/{name} b/{name}\ndeleted file mode 100644\n"
    if was is None:
        return head + f"Binary or unknown file a/{name}\n"
    lines = was.splitlines()
    body = "".join(f"-{line}\n" for line in lines)
    return head + f"--- a/{name}\n+++ /dev/null\n@@ -1,{len(lines)} +0,0 @@\n" + body


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
    data = read_regular(path, NEW_FILE_BYTES)
    if data is None or b"\0" in data:
        return None
    text = data[:NEW_FILE_BYTES].decode("utf-8", errors="replace")
    return text + ("\n… cut" if len(data) > NEW_FILE_BYTES else "")
