"""The hosts of a shared database as the board's JSON gives them (``/api/hosts``): what /hosts
lists, as data."""

from __future__ import annotations

from typing import Any

from bot.fleet.status import HostLine


def host_row(host: HostLine) -> dict[str, Any]:
    """A host as the board's JSON gives it."""
    return {
        "host": host.host,
        "online": host.online,
        "since_s": round(host.since_s),
        "runners": list(host.runners),
        "engines": [
            {"name": e.name, "available": e.available, "line": e.line, "sandbox": e.sandbox}
            for e in host.engines
        ],
        "slots": host.slots,
        "running": host.running,
        "projects": [{"name": n, "path": p} for n, p in host.projects],
        "windows": [{"engine": w.engine, "window": w.window, "used": w.used} for w in host.windows],
    }
