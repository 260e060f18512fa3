"""Reading a file an agent may have planted: a regular file only, never through a link and
never blocking (a FIFO or a device under that name is refused, not waited on), size-capped,
and read off the event loop by async callers (``read_capped_soon``)."""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from pathlib import Path

from bot.errors import FileRefused, Unreadable

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def read_regular(path: Path, limit: int) -> bytes | None:
    """At most ``limit + 1`` bytes of the regular file at ``path`` (one more than the limit
    tells a caller it was cut); None when it is missing, a link, or not a regular file."""
    try:
        fd = _open_regular(path)
    except FileRefused:
        return None
    with os.fdopen(fd, "rb") as file:
        return file.read(limit + 1)


def read_capped(path: Path, limit: int) -> bytes:
    """The whole regular file at ``path``, of at most ``limit`` bytes; ``FileRefused`` (why:
    missing, a link, not a regular file, too large, unreadable) otherwise. Blocks on nothing
    but the disk: call it in a thread from async code."""
    fd = _open_regular(path)
    with os.fdopen(fd, "rb") as file:
        if os.fstat(file.fileno()).st_size > limit:
            raise FileRefused(str(path), Unreadable.TOO_LARGE, limit)
        data = file.read(limit + 1)  # a file growing meanwhile is cut here, not read on
    if len(data) > limit:
        raise FileRefused(str(path), Unreadable.TOO_LARGE, limit)
    return data


async def read_capped_soon(path: Path, limit: int) -> bytes:
    """``read_capped`` in a worker thread: the event loop never waits on the disk."""
    return await asyncio.to_thread(read_capped, path, limit)


def _open_regular(path: Path) -> int:
    """A descriptor of the regular file at ``path`` (never a link); what is something else
    is refused by its kind before it is opened, and again after (it may have been swapped)."""
    try:
        kind = os.lstat(path).st_mode
    except OSError as exc:
        raise _refusal(path, exc) from exc
    if stat.S_ISLNK(kind):
        raise FileRefused(str(path), Unreadable.LINK)
    if not stat.S_ISREG(kind):
        raise FileRefused(str(path), Unreadable.SPECIAL)
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        raise _refusal(path, exc) from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FileRefused(str(path), Unreadable.SPECIAL)
    return fd


def _refusal(path: Path, exc: OSError) -> FileRefused:
    if exc.errno == errno.ENOENT:
        return FileRefused(str(path), Unreadable.MISSING)
    if exc.errno == errno.ELOOP and path.is_symlink():
        return FileRefused(str(path), Unreadable.LINK)
    return FileRefused(str(path), Unreadable.UNREADABLE, detail=exc.strerror or str(exc))
