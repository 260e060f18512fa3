"""The hosts of a shared database as the board's JSON gives them (``/api/hosts``): what /hosts
lists, as data, with the lines /hosts says of each host as plain text in the reader's language
(the page draws those, so the board and the chat say the same)."""

from __future__ import annotations

from typing import Any

from bot.fleet.status import HostLine, host_text
from bot.telegram.render import plain
from bot.telegram.texts import Texts


def host_row(host: HostLine, texts: Texts, locale: str) -> dict[str, Any]:
    """A host as the board's JSON gives it."""
    return {
        "host": host.host,
        "online": host.online,
        "since_s": round(host.since_s),
        "runners": list(host.runners),
        "engines": [
            {"name": e.name, "available": e.available, "sandbox": e.sandbox} for e in host.engines
        ],
        "slots": host.slots,
        "running": host.running,
        "projects": [{"name": n, "path": p} for n, p in host.projects],
        "windows": [{"engine": w.engine, "window": w.window, "used": w.used} for w in host.windows],
        "lines": [plain(line).strip() for line in host_text(texts, locale, host)],
    }


def hosts_title(texts: Texts, locale: str) -> str:
    return plain(texts.get(locale, "hosts.title"))
