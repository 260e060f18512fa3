"""Finding processes by their command line (for "no process left behind" checks)."""

from __future__ import annotations

import contextlib

import psutil


def matching(marker: str, data_dir: str | None = None) -> list[psutil.Process]:
    """Processes whose command line holds ``marker``; with ``data_dir``, only those started
    for that bot (``DETACH_DATA_DIR`` in their environment): another xdist worker's test may
    run the same command line at the same time."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if marker in " ".join(proc.info["cmdline"] or []) and (
                data_dir is None or proc.environ().get("DETACH_DATA_DIR") == data_dir
            ):
                found.append(proc)
    return found


def daemons_of(*pids: int) -> list[psutil.Process]:
    """The fake agents' daemons (tests/support/fake_claude.py) started by a bot or worker of
    ``pids``: they carry its ``DETACH_AGENT_RUN`` (``<pid>.<start time>``) however far they
    forked away, and another xdist worker's test may have its own running meanwhile."""
    runs = tuple(f"{pid}." for pid in pids)
    found = []
    for proc in matching("fake-daemon-"):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("DETACH_AGENT_RUN", "").startswith(runs):
                found.append(proc)
    return found
