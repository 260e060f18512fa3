"""How `detach mcp` hands a task to the running bot: the bot's heartbeat says it runs, the task
goes in as a task file in its inbox, and the caller waits (bounded) until the bot took it, refused
it, or its preflight held it for the owner (the caller is told why, and that nothing runs unless
the owner starts it)."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

from bot.errors import ToolRefused
from bot.tasks.taskfile import SECTIONS

ALIVE_STALE_S = 30.0  # the bot's heartbeat (touched every 5 s) older than this: not running
START_WAIT_S = 20.0  # for the bot to take a task file
START_GRACE_S = 30.0  # taken at the last moment: for the bot to say so
POLL_S = 0.25


def heartbeat_fresh(alive_file: Path, stale_s: float = ALIVE_STALE_S) -> bool:
    """Whether a bot runs on this data directory: its heartbeat is younger than ``stale_s``."""
    try:
        age = time.time() - alive_file.stat().st_mtime
    except OSError:
        return False
    return age <= stale_s


def bot_runs(alive_file: Path, stale_s: float) -> None:
    """Refuse work that only the bot can do while its heartbeat is missing or stale."""
    if not heartbeat_fresh(alive_file, stale_s):
        raise ToolRefused(
            "the Detach bot is not running (no heartbeat in "
            f"{alive_file}): start it (`make run`, or `systemctl --user start "
            "detach`) and try again. Nothing was started."
        )


async def taken(path: Path, wait_s: float) -> int:
    """Wait until the bot took the task file: its id, or its reason for refusing (or holding)
    it. Not taken in time: the file is withdrawn (nothing starts later behind the caller's
    back)."""
    accepted = path.parent / "accepted"
    deadline = time.monotonic() + wait_s
    while True:
        for done in accepted.glob(f"*-{path.name}"):
            match = re.match(r"(\d+)-", done.name)
            if match:
                return int(match.group(1))
        said = _said(path)
        if said is not None:
            raise ToolRefused(said)
        if time.monotonic() >= deadline + START_GRACE_S:
            raise ToolRefused("the bot took the task file but did not say so; see list")
        if time.monotonic() >= deadline and path.exists():
            try:
                path.rename(path.with_name(f".{path.name}.withdrawn"))
            except OSError:
                pass  # the bot took it just now: its answer follows
            else:
                waited = f"{wait_s:.0f} s"
                raise ToolRefused(
                    f"the Detach bot did not take the task within {waited} (is it "
                    "running?); nothing was started"
                )
        await asyncio.sleep(POLL_S)


def _said(path: Path) -> str | None:
    """Why the bot did not start the task file: refused, or held by its preflight."""
    reason = path.parent / "rejected" / f"{path.name}.reason.txt"
    if reason.exists():
        return f"the bot refused the task: {reason.read_text().strip()}"
    for held in (path.parent / "held").glob(f"h*-{path.name}.reason.txt"):
        if re.fullmatch(rf"h\d+-{re.escape(path.name)}\.reason\.txt", held.name):
            return f"not started: {held.read_text().strip()}"
    return None


def one_line(text: str) -> str:
    """A client's name as a task file's line carries it."""
    return re.sub(r"[\s#]+", " ", text).strip()[:80] or "an MCP client"


def plain_goal(goal: str) -> str:
    """A goal as a task file's section holds it: lines the file's parser would read as its own
    structure (a section heading, a ``---`` fence) keep their look but not that meaning."""
    lines = []
    for line in goal.splitlines():
        if line.strip() == "---":
            line = "___"
        elif line.startswith("# ") and line[2:].strip() in SECTIONS:
            line = " " + line
        lines.append(line)
    return "\n".join(lines)
