"""What a turn changed in its repository, for the completion card."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from bot.telegram.render import shorten

TIMEOUT_S = 5.0


async def diff_stat(cwd: str, max_chars: int = 1200) -> str:
    """``git diff --stat`` (tracked changes, staged or not) of the repository holding ``cwd``;
    empty when it is not a repository, nothing changed, or git is slow or missing."""
    path = Path(cwd)
    if not path.is_dir() or not any((p / ".git").exists() for p in (path, *path.parents)):
        return ""  # not in a repository: no git process to spawn
    with contextlib.suppress(OSError, TimeoutError):
        proc = await asyncio.create_subprocess_exec(
            "git",
            "-C",
            cwd,
            "diff",
            "HEAD",
            "--stat",
            "--no-color",
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
            text = out.decode(errors="replace").strip()
            return shorten(text, max_chars)
    return ""
