"""Clean-up that a cancel must not cut short: stopping an agent's tree, closing its channel.

``shielded(work)`` awaits ``work`` to its end even when the awaiting task is cancelled
meanwhile (a /cancel, a timeout, a shutdown): the cancel is raised once ``work`` is done, never
inside it, so ``asyncio.timeout`` still turns it into its ``TimeoutError``. ``work`` must be
bounded by its own waits (stop_tree's grace, a drain's). Plain asyncio: anyio's shielded cancel
scope did this before, and importing anyio cost the idle bot 2.6 MB and 15 ms of its start."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def shielded(work: Awaitable[T]) -> T:
    task = asyncio.ensure_future(work)
    cancel: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError as exc:
            if task.done() and task.cancelled() and cancel is None:
                raise  # the work itself was cancelled, not its waiter
            cancel = exc  # the waiter's: held until the work is done
    if cancel is not None:
        if not task.cancelled() and task.exception() is not None:
            raise cancel from task.exception()
        raise cancel
    return task.result()
