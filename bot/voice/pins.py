"""Model files pinned by content, not only by their package's version: each file a model is
loaded from must have the SHA-256 its constant names, else ``WeightsRefused`` (a file without a
pin is refused too). Blocking reads: called on the recognizer's thread, never the event loop.
A file's digest is kept for the process, keyed by its identity on disk (device, inode, size,
modification and change times), so it is hashed once, and again only when it changes."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from pathlib import Path

from bot.errors import WeightsRefused

CHUNK = 1 << 20
_digests: dict[tuple[int, int, int, int, int], str] = {}
_lock = threading.Lock()  # one hashing at a time: two notes never hash the same file twice


def check(files: Mapping[str, Path], pins: Mapping[str, str]) -> None:
    """Each of ``files`` (by the name the model knows it as) has its pinned digest."""
    for name, path in files.items():
        expected = pins.get(name, "")
        found = digest(path) if expected else ""
        if not expected or found != expected:
            raise WeightsRefused(str(path), expected, found)


def check_bytes(files: Mapping[str, bytes], pins: Mapping[str, str]) -> None:
    """The same for files read into memory."""
    for name, data in files.items():
        expected = pins.get(name, "")
        found = hashlib.sha256(data).hexdigest() if expected else ""
        if not expected or found != expected:
            raise WeightsRefused(name, expected, found)


def digest(path: Path) -> str:
    """The file's SHA-256, computed once per process while it stays the same file."""
    with _lock:
        with path.open("rb") as file:
            info = os.fstat(file.fileno())
            key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
            known = _digests.get(key)
            if known is None:
                hashed = hashlib.sha256()
                while chunk := file.read(CHUNK):
                    hashed.update(chunk)
                known = _digests[key] = hashed.hexdigest()
        return known
