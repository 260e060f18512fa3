"""What Codex's sandbox can leave behind. For each sandboxed command its bubblewrap sandbox
creates empty ``.git``, ``.codex``, ``.agents`` and ``.aws`` directories in every writable root
where they do not exist (mount points that keep them read-only) and removes them after the
command; a command stopped with the turn leaves them (measured with 0.171, reference §8). An
empty ``.git`` in /tmp makes every directory below it look like a repository; an empty
``.codex`` makes the next run warn about untrusted project configuration."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

MOUNT_POINTS = (".git", ".codex", ".agents", ".aws")


def absent(roots: Iterable[Path]) -> list[Path]:
    """The mount points the sandbox may create under ``roots``: those that do not exist now."""
    return [
        root / name
        for root in dict.fromkeys(roots)
        if root.is_dir()
        for name in MOUNT_POINTS
        if not (root / name).exists()
    ]


def remove_left(paths: Iterable[Path]) -> int:
    """Remove those of ``paths`` that are now empty directories (what the sandbox made; a
    directory the agent filled, such as a ``git init``, stays). Returns how many."""
    removed = 0
    for path in paths:
        if path.is_dir() and not path.is_symlink():
            with contextlib.suppress(OSError):  # not empty, or gone meanwhile
                path.rmdir()
                removed += 1
    if removed:
        log.info("removed %s empty sandbox mount point(s) a stopped Codex command left", removed)
    return removed
