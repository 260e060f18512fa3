"""What a turn changed in its repository: for the completion card, and for another engine that
takes a task over."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from bot.telegram.render import shorten

TIMEOUT_S = 5.0
MAX_NEW_FILES = 20


async def diff_stat(cwd: str, max_chars: int = 1200) -> str:
    """``git diff --stat`` (tracked changes, staged or not) of the repository holding ``cwd``,
    then its new files (untracked, not ignored); empty when it is not a repository, nothing
    changed, or git is slow or missing."""
    if not _in_repository(Path(cwd)):
        return ""  # not in a repository: no git process to spawn
    stat, new = await asyncio.gather(
        _git(cwd, "diff", "HEAD", "--stat", "--no-color"),
        _git(cwd, "ls-files", "--others", "--exclude-standard"),
    )
    lines = [stat] if stat else []
    files = new.splitlines()
    lines += [f" {name} | new" for name in files[:MAX_NEW_FILES]]
    if len(files) > MAX_NEW_FILES:
        lines.append(f" … {len(files) - MAX_NEW_FILES} more new files")
    return shorten("\n".join(lines), max_chars)


async def diff_text(cwd: str, max_chars: int = 12000) -> str | None:
    """The uncommitted changes of the repository holding ``cwd``: ``git diff HEAD`` and the
    names of its new files, cut to ``max_chars``; None when it is not a repository."""
    if not _in_repository(Path(cwd)):
        return None
    diff, new = await asyncio.gather(
        _git(cwd, "diff", "HEAD", "--no-color", "--no-ext-diff"),
        _git(cwd, "ls-files", "--others", "--exclude-standard"),
    )
    files = new.splitlines()
    listed = [f"new file (untracked): {name}" for name in files[:MAX_NEW_FILES]]
    if len(files) > MAX_NEW_FILES:
        listed.append(f"… {len(files) - MAX_NEW_FILES} more new files")
    text = "\n".join(part for part in (diff, "\n".join(listed)) if part)
    if len(text) > max_chars:
        text = text[:max_chars] + f"\n… cut: {len(text) - max_chars} more characters"
    return text


def _in_repository(path: Path) -> bool:
    return path.is_dir() and any((p / ".git").exists() for p in (path, *path.parents))


async def _git(cwd: str, *args: str) -> str:
    """A git command's output in ``cwd``; empty when it fails or takes too long."""
    with contextlib.suppress(OSError, TimeoutError):
        proc = await asyncio.create_subprocess_exec(
            "git",
            "-C",
            cwd,
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        if proc.returncode == 0:
            return out.decode(errors="replace").strip()
    return ""
