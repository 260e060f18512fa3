"""Finding processes by their command line (for "no process left behind" checks)."""

from __future__ import annotations

import contextlib

import psutil


def matching(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            if marker in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
    return found
