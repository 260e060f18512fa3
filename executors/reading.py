"""Reading a file an agent may have planted: a regular file only, never through a link and
never blocking (a FIFO or a device under that name is refused, not opened for a read)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def read_regular(path: Path, limit: int) -> bytes | None:
    """At most ``limit + 1`` bytes of the regular file at ``path`` (one more than the limit
    tells a caller it was cut); None when it is missing, a link, or not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            return None
        return file.read(limit + 1)
