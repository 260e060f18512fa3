"""A warm start's key (``executors.warm``'s contract): what a cold start of the task would be
made of, down to the files the CLI reads and the repository's state it snapshots at start."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from bot.models import TurnSpec
from executors.gitguard import GitGuard
from executors.gitscope import marked_top
from executors.reading import read_regular

GIT_TIMEOUT_S = 10.0
FILE_BYTES = 4 << 20  # a read file larger than this is keyed as such (never equal to content)


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
    contents = await asyncio.to_thread(_fingerprints, (Path(argv[0]), *files), where)
    return WarmKey(
        engine=engine,
        binary=contents[0][1],
        cwd=str(where),
        mode=mode,
        argv=argv,
        env=tuple(sorted(env.items())),
        files=contents[1:],
        deny=tuple(str(p) for p in deny),
        repo=await _repo_state(where, deny),
        day=time.strftime("%Y-%m-%d"),
        nice=nice,
    )


def _fingerprints(paths: Iterable[Path], cwd: Path) -> tuple[tuple[str, str], ...]:
    """Each path with the sha256 of its content ("" when absent); the first (the binary,
    large) by its resolved path, size and mtime; a link followed outside ``cwd`` only."""
    found: list[tuple[str, str]] = []
    for n, path in enumerate(paths):
        try:
            if n == 0:
                stat = path.resolve().stat()
                found.append((str(path), f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"))
            else:  # an agent may have written it: a regular file only, bounded, never blocking
                inside = path.is_relative_to(cwd)
                data = read_regular(path if inside else path.resolve(), FILE_BYTES)
                found.append((str(path), hashlib.sha256(data).hexdigest() if data else ""))
        except OSError:
            found.append((str(path), ""))
    return tuple(found)


async def _repo_state(cwd: Path, deny: tuple[Path, ...]) -> str:
    """The repository's branch, head and changed files as git says them (what the CLI
    snapshots at start), through the bot's confined git; no git outside a repository."""
    if await asyncio.to_thread(marked_top, cwd) is None:
        return "no repository"
    args = ("--no-optional-locks", "status", "--porcelain=v2", "--branch")
    done = await GitGuard(lambda: deny).git(cwd, *args, timeout_s=GIT_TIMEOUT_S)
    return f"{done.code}\n{done.out}"  # a refusal or a timeout: never equal to a state


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
    """``spec`` without its task: no id, turn, prompt; the tag a warm process carries; and
    no ``git_env`` (its turn's look at the repository, before that turn ran): a warm start's
    CLI runs git at once, and its environment is decided by a look at that moment."""
    tag = f"{spec.process_tag.rpartition(':')[0]}:warm" if spec.process_tag else None
    return replace(spec, task_id=0, turn_id=0, prompt="", process_tag=tag, git_env=None)
