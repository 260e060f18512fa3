"""A scale-out worker (`detach worker NAME`): runs agent turns claimed from the shared
PostgreSQL database, next to the bot that holds the Telegram connection. Everything it tells
users goes into the shared outbox, which the bot delivers; a /cancel or an approval tap
handled by the bot reaches it through the database. It imports no Telegram library. Run one
per machine (or several) with ``systemd/detach-worker@.service``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Mapping

from bot.core import Core, build_core, freeze_what_started, start_core
from bot.models import ProcessRole
from bot.ports import Executor
from bot.settings import Settings
from bot.telegram.render import plain
from bot.telegram.texts import DEFAULT_LOCALE

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def build_worker(
    settings: Settings, name: str, executors: Mapping[str, Executor] | None = None
) -> AsyncIterator[Core]:
    """A worker's objects, claiming turns. Its name is stable (with the host's): a restarted
    worker stops what its earlier run left behind and takes that run's turns over at once.
    ``executors`` replace the engines (as ``bot.app.build``'s do)."""
    async with contextlib.AsyncExitStack() as stack:
        core = await build_core(
            settings, stack, role=ProcessRole.WORKER, name=name, given_executors=executors
        )
        await start_core(core, stack)
        await core.scheduler.start()  # it runs turns: not with the first one
        await core.engines.ready()  # until then it claims nothing (it has no engine yet)
        assert core.shared is not None
        lines = (plain(core.texts.say(DEFAULT_LOCALE, line)) for line in core.engines.status)
        log.info("worker %s ready: %s", core.shared.lease.runner_id, "; ".join(lines))
        yield core


async def serve_worker(settings: Settings, name: str) -> None:
    """Run until SIGTERM/SIGINT; running turns get the same clean stop as in the bot."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with build_worker(settings, name):
        freeze_what_started()
        await stop.wait()
