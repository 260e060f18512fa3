"""What one turn changed in a repository, not what was there before it: the commit the turn
started at and a signature of every file that then differed from it (the owner's own
uncommitted edits in a plain checkout), taken before the agent starts; after the turn, the
card lists the commits made since that commit and only the files whose state changed.

All git runs through ``executors.gitguard`` (the repository's hooks, fsmonitor and drivers
neutralised), bounded. Files are read by the bot only to hash them: regular files up to
``HASH_BYTES`` (a larger one, a link or a special file is signed by its metadata), opened
without following a link and without blocking, never shown."""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.git.repository import in_repository
from bot.ports import TreeState
from bot.redaction import Redactor
from bot.telegram.render import shorten
from bot.turns.gitinfo import TIMEOUT_S, Within, diff_stat, listed, output
from executors.gitguard import GitGuard
from executors.gitscope import FIXED, PLAIN_DIFF, Scope
from executors.reading import read_regular

HASH_BYTES = 1 << 20  # files larger than this are signed by size and modification time
MAX_HASHED = 5000  # dirty files hashed at most; the rest are signed by their metadata
MAX_PATHS = 200  # files named to git for the stat; the rest are counted
MAX_COMMITS = 5
TOP = ("--no-relative", "--no-renames")  # paths from the top, whatever the repository says


@dataclass(frozen=True, slots=True)
class Baseline:
    """A repository's state when a turn started. ``top``: the work tree's top (None: ``cwd``
    was not in a repository git would run in); ``head``: its commit (None: none yet);
    ``dirty``: path (from the top) -> signature of each file differing from ``head`` or new;
    ``untracked``: which of them git does not track."""

    top: str | None
    head: str | None = None
    dirty: dict[str, str] = field(default_factory=dict)
    untracked: frozenset[str] = frozenset()
    texts: dict[str, str] = field(default_factory=dict)  # only in a record: see ``recorded``


RECORD_KIND = "Baseline"  # the first turn's, in the task's transcript (a line nobody reads)
TEXT_BYTES = 64 * 1024  # a dirty file's content is recorded up to this size…
TEXTS_BYTES = 512 * 1024  # …and the first turn's record holds at most this much content
# files whose names say they hold a key or a password: never recorded, whatever they hold
SECRET_FILES = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "id_rsa*",
    "*.p12",
    "*.pfx",
    "credentials*",
    "*secret*",
    ".netrc",
    ".npmrc",
    ".pypirc",
)


def secret_looking(path: str) -> bool:
    """Whether a file's name (any case) is one of ``SECRET_FILES``."""
    name = path.rsplit("/", 1)[-1].lower()
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in SECRET_FILES)


async def recorded(
    before: Baseline, seq: int, secrets: tuple[str, ...] = ()
) -> list[tuple[str, dict[str, Any]]]:
    """The transcript entry of turn ``seq``'s baseline: only the first turn's, in a repository
    (where the board's diff of the task starts); none for any other. It holds the content of
    the files that differed from the commit (``texts``: the owner's own edits, so the board
    shows only what the task changed on top of them): UTF-8 text files of at most
    ``TEXT_BYTES``, ``TEXTS_BYTES`` in all, none holding one of ``secrets`` nor named like a
    secret (``SECRET_FILES``); a file without one is diffed against the commit."""
    if seq != 1 or before.top is None:
        return []
    texts = await asyncio.to_thread(
        _texts, Path(before.top), sorted(before.dirty), Redactor.of(secrets).secrets
    )
    body = {"top": before.top, "head": before.head, "dirty": before.dirty, "texts": texts}
    return [(RECORD_KIND, {**body, "untracked": sorted(before.untracked)})]


def from_record(body: dict[str, object]) -> Baseline | None:
    """A ``recorded`` entry's baseline; None: not one."""
    top, head, dirty = body.get("top"), body.get("head"), body.get("dirty")
    if not isinstance(top, str) or not isinstance(dirty, dict):
        return None
    untracked = body.get("untracked")
    names = frozenset(str(p) for p in untracked) if isinstance(untracked, list) else frozenset()
    clean = {str(k): str(v) for k, v in dirty.items()}
    found = body.get("texts")
    texts = (
        {str(k): v for k, v in found.items() if isinstance(v, str)}
        if isinstance(found, dict)
        else {}
    )
    return Baseline(top, head if isinstance(head, str) else None, clean, names, texts)


def read_text(path: Path, limit: int) -> str | None:
    """A regular file's content as text, opened without following a link and without
    blocking; None: missing, special, binary, not UTF-8 or larger than ``limit`` bytes."""
    data = read_regular(path, limit)
    if data is None or len(data) > limit or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _texts(top: Path, paths: list[str], secrets: tuple[str, ...]) -> dict[str, str]:
    texts: dict[str, str] = {}
    left = TEXTS_BYTES
    for path in paths:
        if secret_looking(path):
            continue
        text = read_text(top / path, min(TEXT_BYTES, left))
        if text is None or any(secret in text for secret in secrets):
            continue
        texts[path] = text
        left -= len(text.encode())
        if left <= 0:
            break
    return texts


async def take(guard: GitGuard, cwd: str) -> Baseline:
    """The state of the repository holding ``cwd`` now (three git processes in one jail)."""
    return (await opening(guard, cwd))[0]


async def opening(guard: GitGuard, cwd: str) -> tuple[Baseline, Scope | None]:
    """``take``, with the repository's Scope as it was read for it (None: no repository):
    what the agent's own git gets (``Scope.cli_env``) is read once a turn, not twice. The
    configuration, the top and the status are read in one jail (``GitGuard.batch``)."""
    if not await in_repository(Path(cwd)):
        return Baseline(None), None
    try:
        scope, ran = await guard.batch(cwd, TOPLEVEL, STATUS, timeout_s=TIMEOUT_S)
    except OSError as exc:  # no bubblewrap or git to start: nothing of it will run either
        return Baseline(None), Scope(FIXED, f"git cannot run: {exc}")
    if scope.refusal is not None:
        return Baseline(None), scope
    top, status = (done.out if done.code == 0 else "" for done in ran)
    return await _state(top, status), scope


async def glance(guard: GitGuard, cwd: str) -> TreeState | None:
    """The repository's top, commit and whether anything differs, from the jail ``opening``
    takes (``prepare``), no file read; None: no repository, or refused."""
    if not await in_repository(Path(cwd)):
        return None
    try:
        scope, ran = await guard.batch(cwd, TOPLEVEL, STATUS, timeout_s=TIMEOUT_S)
    except OSError:
        return None
    top, status = (done.out if done.code == 0 else "" for done in ran) if ran else ("", "")
    if scope.refusal is not None or not top or not status:
        return None
    head, changed, _untracked = _parse_status(status)
    return TreeState(top, head, bool(changed))


async def prepare(guard: GitGuard, cwd: str, after_s: float = 0.0) -> None:
    """Start the jail the next ``opening`` in ``cwd`` takes (in a repository, where the guard
    keeps one: ``GitGuard.prepare``; ``after_s`` later), so that the next turn's agent does
    not wait for it."""
    if await in_repository(Path(cwd)):
        with contextlib.suppress(OSError):  # no jail ahead: the next one starts as usual
            await guard.prepare(cwd, TOPLEVEL, STATUS, after_s=after_s)


TOPLEVEL = ("rev-parse", "--show-toplevel")
STATUS = ("status", "--porcelain=v2", "--branch", "-z", "-uall", "--no-renames")


async def _state(top: str, status: str) -> Baseline:
    if not top or not status:
        return Baseline(None)
    head, changed, untracked = _parse_status(status)
    # a clean checkout (the usual turn's start) has nothing to sign: no thread's round trip
    signed = await asyncio.to_thread(_sign_all, Path(top), changed) if changed else {}
    return Baseline(top, head, signed, frozenset(untracked))


async def turn_changes(guard: GitGuard, cwd: str, before: Baseline, max_chars: int = 1200) -> str:
    """The card's "Changed" block: the commits made since ``before`` (newest first), then the
    stat of the files the turn changed (committed or not), the new files it left and the
    earlier edits it undid; empty when it changed nothing. A directory that was no
    repository before falls back to its whole ``diff_stat`` (the agent made the repository)."""
    return (await changes_since(guard, cwd, before, max_chars))[0]


async def changes_since(
    guard: GitGuard, cwd: str, before: Baseline, max_chars: int = 1200
) -> tuple[str, TreeState | None]:
    """``turn_changes``, and the work tree's state as read for it (None: none was)."""
    if before.top is None:
        return await diff_stat(guard, cwd, max_chars), None
    after, scope = await opening(guard, cwd)  # the Scope as read with it: one jail for both
    state = TreeState(after.top, after.head, bool(after.dirty)) if after.top else None
    if after.top is None or after.top != before.top or scope is None:
        return "", state
    within = Within(guard, scope)
    return await _changes(within, before, after, after.top, cwd, max_chars), state


async def _changes(
    within: Within, before: Baseline, after: Baseline, top: str, cwd: str, max_chars: int
) -> str:
    commits, committed = await _commits(top, within, before.head, after.head)
    touched = {p for p, sig in after.dirty.items() if before.dirty.get(p) != sig}
    undone = {p for p in before.dirty if p not in after.dirty and p not in committed}
    paths = sorted(committed | touched)
    new = [p for p in paths if p in after.untracked]
    tracked = [p for p in paths if p not in after.untracked]
    gone = sorted(p for p in undone if p in before.untracked)  # a new file of the owner's
    lines = list(commits)
    if tracked:
        base = before.head or await _empty_tree(cwd, within)
        lines.append(await _stat(top, within, base, tracked[:MAX_PATHS]))
        if len(tracked) > MAX_PATHS:
            lines.append(f" … {len(tracked) - MAX_PATHS} more changed files")
    lines += listed(new, " {} | new", " … {} more new files")
    lines += listed(sorted(undone - set(gone)), " {} | reverted", " … {} more reverted")
    lines += listed(gone, " {} | deleted", " … {} more deleted")
    return shorten("\n".join(line for line in lines if line), max_chars)


async def _commits(
    cwd: str, within: Within, start: str | None, end: str | None
) -> tuple[list[str], set[str]]:
    """One line per commit made since ``start`` (``abc1234 subject``), and the files they
    changed between the two commits."""
    if end is None or end == start:
        return [], set()
    span = f"{start}..{end}" if start else end
    base = start or await _empty_tree(cwd, within)
    log, count, names = await asyncio.gather(
        output(cwd, within, "log", "--no-color", "--format=%h %s", f"-n{MAX_COMMITS}", span, "--"),
        output(cwd, within, "rev-list", "--count", span, "--"),
        output(cwd, within, "diff", *PLAIN_DIFF, *TOP, "--name-only", "-z", base, end),
    )
    lines = [f"● {shorten(line, 72, one_line=True)}" for line in log.splitlines()]
    if count.isdigit() and int(count) > len(lines):
        lines.append(f"● … {int(count) - len(lines)} more commits")
    return lines, {name for name in names.split("\0") if name}


async def _stat(cwd: str, within: Within, base: str, paths: list[str]) -> str:
    """``git diff --stat`` of the work tree against ``base`` for exactly these files (``cwd``:
    the top, as the names are from it; taken literally, never as patterns)."""
    args = ("diff", *PLAIN_DIFF, *TOP, "--stat", base, "--", *paths)
    return await output(cwd, within, "--literal-pathspecs", *args)


async def _empty_tree(cwd: str, within: Within) -> str:
    """The empty tree's id in this repository's hash (a repository with no commit yet)."""
    return await output(cwd, within, "hash-object", "-t", "tree", "--stdin")


def _parse_status(status: str) -> tuple[str | None, list[str], list[str]]:
    """``git status --porcelain=v2 --branch -z``: the commit (None before the first), the
    changed paths, and which of them are untracked."""
    head: str | None = None
    changed: list[str] = []
    untracked: list[str] = []
    for entry in status.split("\0"):
        if entry.startswith("# branch.oid "):
            oid = entry.removeprefix("# branch.oid ")
            head = None if oid == "(initial)" else oid
        elif entry.startswith(("1 ", "2 ")):
            changed.append(entry.split(" ", 8)[8])
        elif entry.startswith("u "):
            changed.append(entry.split(" ", 10)[10])
        elif entry.startswith("? "):
            changed.append(entry[2:])
            untracked.append(entry[2:])
    return head, changed, untracked


def _sign_all(top: Path, paths: list[str]) -> dict[str, str]:
    return {path: _sign(top / path, n < MAX_HASHED) for n, path in enumerate(paths)}


def _sign(path: Path, hashed: bool) -> str:
    """What a file is now: its content's hash, else its kind, size and modification time."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "unreadable"
    meta = f"{info.st_mode:o}:{info.st_size}:{info.st_mtime_ns}"
    if not stat.S_ISREG(info.st_mode) or info.st_size > HASH_BYTES or not hashed:
        return meta
    data = read_regular(path, HASH_BYTES)
    if data is None:
        return meta
    return f"{info.st_mode:o}:{hashlib.sha256(data).hexdigest()}"
