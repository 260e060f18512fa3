"""A warm start's key (``executors.warm``'s contract): what a cold start of the task would be
made of, down to the files the CLI reads and the repository's state it snapshots at start."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from asyncio.subprocess import DEVNULL, PIPE
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from bot.models import TurnSpec
from executors.gitscope import marked_top

GIT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class WarmKey:
    """Everything a cold start of the task would be made of (see the module's contract)."""

    engine: str
    binary: str
    cwd: str
    mode: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    files: tuple[tuple[str, str], ...]
    deny: tuple[str, ...]
    repo: str
    day: str
    nice: int


async def warm_key(
    *,
    engine: str,
    mode: str,
    argv: Iterable[str],
    cwd: Path,
    env: Mapping[str, str],
    files: Iterable[Path],
    deny: Iterable[Path],
    nice: int,
) -> WarmKey:
    """The key of a start with these parts (a few file reads and one git status)."""
    argv, deny = tuple(argv), tuple(deny)
    where = await asyncio.to_thread(Path(cwd).resolve)
    contents = await asyncio.to_thread(_fingerprints, (Path(argv[0]), *files))
    return WarmKey(
        engine=engine,
        binary=contents[0][1],
        cwd=str(where),
        mode=mode,
        argv=argv,
        env=tuple(sorted(env.items())),
        files=contents[1:],
        deny=tuple(str(p) for p in deny),
        repo=await _repo_state(where, env),
        day=time.strftime("%Y-%m-%d"),
        nice=nice,
    )


def _fingerprints(paths: Iterable[Path]) -> tuple[tuple[str, str], ...]:
    """Each path with the sha256 of its content ("" when absent); the first (the binary,
    large) by its resolved path, size and mtime."""
    found: list[tuple[str, str]] = []
    for n, path in enumerate(paths):
        try:
            if n == 0:
                stat = path.resolve().stat()
                found.append((str(path), f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"))
            else:
                found.append((str(path), hashlib.sha256(path.read_bytes()).hexdigest()))
        except OSError:
            found.append((str(path), ""))
    return tuple(found)


async def _repo_state(cwd: Path, env: Mapping[str, str]) -> str:
    """The repository's branch, head and changed files as git says them: run as the CLI runs
    its own ``git status`` at start (unconfined, with the child's environment, which carries
    ``gitguard.cli_env``'s overrides); no git outside a repository."""
    if await asyncio.to_thread(marked_top, cwd) is None:
        return "no repository"
    args = ("git", "--no-optional-locks", "-C", str(cwd), "status", "--porcelain=v2", "--branch")
    proc = await asyncio.create_subprocess_exec(
        *args, stdin=DEVNULL, stdout=PIPE, stderr=DEVNULL, env=dict(env)
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), GIT_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return "git status timed out"  # never equal to a state git said
    return f"{proc.returncode}\n{out.decode(errors='replace')}"


def claude_files(env: Mapping[str, str], cwd: Path, project: bool) -> tuple[Path, ...]:
    """What Claude Code reads at start besides its argv: the login, user settings and memory
    of its config directory, and the project's own when project settings load."""
    home = Path(env.get("HOME") or os.path.expanduser("~"))
    config = Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
    own = tuple(config / name for name in (".credentials.json", "settings.json", "CLAUDE.md"))
    if not project:
        return own
    names = (".claude/settings.json", ".claude/settings.local.json", "CLAUDE.md", "CLAUDE.local.md")
    return own + tuple(cwd / name for name in names)


def warm_template(spec: TurnSpec) -> TurnSpec:
    """``spec`` without its task: no id, turn, prompt; the tag a warm process carries."""
    tag = f"{spec.process_tag.rpartition(':')[0]}:warm" if spec.process_tag else None
    return replace(spec, task_id=0, turn_id=0, prompt="", process_tag=tag)
