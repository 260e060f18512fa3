"""A scale-out worker (`detach worker NAME`): runs agent turns (and schedule runs) from the
shared PostgreSQL database, next to the bot that holds the Telegram connection. Everything it
tells users goes into the shared outbox, which the bot delivers; a /cancel or an approval tap
handled by the bot reaches it through the database. Run one per machine (or several) with
``systemd/detach-worker@.service``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import AsyncIterator, Mapping

from bot.app import Core, build_core, start_core
from bot.models import ProcessRole
from bot.settings import Settings
from bot.store.db import Clock, utcnow

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def build_worker(
    settings: Settings, name: str, environ: Mapping[str, str] | None = None, clock: Clock = utcnow
) -> AsyncIterator[Core]:
    """A worker's objects, its job pool started in APScheduler's ``worker`` role. The identity
    is stable (host and name), so a restarted worker recovers the turns it was running."""
    async with contextlib.AsyncExitStack() as stack:
        identity = f"detach-worker-{socket.gethostname()}-{name}"
        core = await build_core(settings, stack, None, environ, clock, ProcessRole.WORKER, identity)
        await start_core(core, settings, stack)
        log.info("worker %s ready: %s", identity, "; ".join(core.status))
        yield core


async def serve_worker(settings: Settings, name: str) -> None:
    """Run until SIGTERM/SIGINT; running turns get the same clean stop as in the bot."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with build_worker(settings, name):
        await stop.wait()
