"""The board's accept side: every connection passes a ``Door`` before aiohttp sees it.

At most ``Limits.connections`` are open and ``Limits.unsigned`` of them have not yet carried a
signed-in request; a new connection beyond that closes the oldest unsigned one (a flood cannot
lock a person out), or is turned away when every open one is signed in. An unsigned connection
is closed ``unsigned_s`` after it opened whatever it sends (a slow header or body included), so
idle sockets from anybody on the machine never pile up. Turned-away connections are logged in
one line at the start of a burst, then at most once every ``say_every_s`` with their count."""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import cast

from bot.board.limits import Limits

log = logging.getLogger(__name__)
Factory = Callable[[], asyncio.Protocol]


class Doors:
    """The open connections of one listening board, by their transport."""

    def __init__(self, limits: Limits) -> None:
        self._limits = limits
        self._open: set[asyncio.Transport] = set()
        self._unsigned: dict[asyncio.Transport, asyncio.TimerHandle] = {}  # oldest first
        self._turned = 0
        self._said_at = -math.inf

    async def listen(self, factory: Factory, host: str, port: int) -> asyncio.Server:
        """Listening on ``host:port`` for ``factory``'s protocols, each behind a Door.
        Raises OSError when it cannot bind."""
        loop = asyncio.get_running_loop()
        return await loop.create_server(lambda: Door(self, factory), host, port, backlog=128)

    def admit(self, transport: asyncio.Transport) -> bool:
        """Whether ``transport`` may be served; room is made by closing the oldest unsigned."""
        limits = self._limits
        full = len(self._open) >= limits.connections
        if self._unsigned and (full or len(self._unsigned) >= limits.unsigned):
            self._close(next(iter(self._unsigned)))
            self._count_turned()
        if len(self._open) >= limits.connections:
            self._count_turned()
            return False
        self._open.add(transport)
        loop = asyncio.get_running_loop()
        self._unsigned[transport] = loop.call_later(limits.unsigned_s, self._close, transport)
        return True

    def signed_in(self, transport: asyncio.Transport | None) -> None:
        """``transport`` carried a signed-in request: it stays as long as aiohttp keeps it."""
        timer = self._unsigned.pop(transport, None) if transport is not None else None
        if timer is not None:
            timer.cancel()

    def gone(self, transport: asyncio.Transport) -> None:
        self._open.discard(transport)
        self.signed_in(transport)

    def shut(self) -> None:
        """Every connection still open is closed (once aiohttp closed its own gracefully)."""
        for transport in list(self._open):
            self._close(transport)

    def _close(self, transport: asyncio.Transport) -> None:
        self.gone(transport)  # at once: it no longer counts, whenever asyncio reports it lost
        transport.abort()

    def _count_turned(self) -> None:
        self._turned += 1
        now = asyncio.get_running_loop().time()
        if now - self._said_at < self._limits.say_every_s:
            return
        log.warning(
            "board: %d connection(s) turned away or closed at its caps "
            "(%d open, %d not signed in); the next count in %.0f s at most",
            self._turned,
            self._limits.connections,
            self._limits.unsigned,
            self._limits.say_every_s,
        )
        self._said_at, self._turned = now, 0


class Door(asyncio.Protocol):
    """One connection: aborted unless ``Doors`` admits it, and handed to the board's protocol
    (made only then) with its first bytes, so an idle one costs no more than this; everything
    asyncio reports of it is passed on."""

    def __init__(self, doors: Doors, factory: Factory) -> None:
        self._doors = doors
        self._factory = factory
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None

    def connection_made(self, base: asyncio.BaseTransport) -> None:
        self._transport = transport = cast(asyncio.Transport, base)  # a TCP connection
        if not self._doors.admit(transport):
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._doors.gone(self._transport)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            if self._transport is None or self._transport.is_closing():
                return
            self._inner = self._factory()
            self._inner.connection_made(self._transport)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()
