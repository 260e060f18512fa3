"""How much of the bot the board may hold: connections (all, and not yet signed in), how long
an idle one stays, event streams per user, and how deep a JSON body may nest. The caps follow
the process's open-file limit, so the database, the agents and Telegram always keep most of it."""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass

CONNECTIONS = 256
UNSIGNED = 64
UNSIGNED_S = 10.0
KEEPALIVE_S = 5.0
STREAMS_PER_USER = 64
JSON_DEPTH = 32
SAY_EVERY_S = 60.0


@dataclass(frozen=True, slots=True)
class Limits:
    """``connections`` open at once, ``unsigned`` of them before any signed-in request (each
    closed ``unsigned_s`` after it opened), ``keepalive_s`` idle between requests, and
    ``say_every_s`` between two log lines about connections turned away."""

    connections: int = CONNECTIONS
    unsigned: int = UNSIGNED
    unsigned_s: float = UNSIGNED_S
    keepalive_s: float = KEEPALIVE_S
    streams_per_user: int = STREAMS_PER_USER
    json_depth: int = JSON_DEPTH
    say_every_s: float = SAY_EVERY_S

    @classmethod
    def for_open_files(cls, open_files: int | None = None) -> Limits:
        """The defaults, within a quarter of ``open_files`` (default: this process's limit)."""
        if open_files is None:
            open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if open_files == resource.RLIM_INFINITY:
            return cls()
        connections = max(8, min(CONNECTIONS, open_files // 4))
        return cls(connections=connections, unsigned=max(2, min(UNSIGNED, connections // 4)))


class StreamQuota:
    """Each user's open event streams, within ``per_user``; a stream whose client left counts
    no more, even before its handler notices."""

    def __init__(self, per_user: int) -> None:
        self._per_user = per_user
        self._open: dict[int, set[asyncio.Transport]] = {}

    def take(self, user_id: int, transport: asyncio.Transport) -> bool:
        """One more stream on ``transport`` for ``user_id``, or False at the cap."""
        live = {t for t in self._open.get(user_id, ()) if not t.is_closing()}
        if len(live) >= self._per_user:
            return False
        self._open[user_id] = live | {transport}
        return True

    def give(self, user_id: int, transport: asyncio.Transport) -> None:
        held = self._open.get(user_id, set())
        held.discard(transport)
        if not held:
            self._open.pop(user_id, None)
