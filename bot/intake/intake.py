"""Work that arrives outside Telegram updates: tasks added from a shell or dropped into the
inbox, and restart recovery."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from pathlib import Path

from bot import failpoints
from bot.approvals.desk import ApprovalDesk
from bot.intake.inbox import Inbox
from bot.models import Task
from bot.store import Store
from bot.telegram.notifier import Notifier
from bot.turns.queue import TurnQueue

log = logging.getLogger(__name__)


ALIVE_EVERY_S = 5.0  # how often the bot's heartbeat file is touched


class Intake:
    """Polls the store for work written by other processes (`detach add`, `detach mcp`): new
    tasks and turns to start, stops to apply; and touches ``alive`` (the heartbeat those
    processes read to tell whether the bot runs)."""

    def __init__(
        self,
        store: Store,
        queue: TurnQueue,
        notifier: Notifier,
        interval_s: float,
        inbox: Inbox | None = None,
        alive: Path | None = None,
    ) -> None:
        self._inbox = inbox
        self._store = store
        self._queue = queue
        self._notifier = notifier
        self._interval_s = interval_s
        self._alive = alive
        self._touched = float("-inf")

    async def run_forever(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception:  # a bad poll must not end intake; the next one retries
                log.exception("intake poll failed")
            await asyncio.sleep(self._interval_s)

    async def poll_once(self) -> None:
        self._beat()
        fresh = await self._store.tasks.unannounced()
        await self._queue.kick_unsubmitted()
        for task_id in await self._store.claims.stops_requested():
            self._queue.stop(task_id)
        for task in fresh:
            async with self._store.atomic():  # announced once, with its acknowledgement
                await self._store.tasks.set_announced(task.id)
                await self._notifier.acknowledge(task)
            log.info("task %s picked up from the shell", task.id)
        if self._inbox is not None:
            await self._inbox.poll_once()

    def _beat(self) -> None:
        if self._alive is None or time.monotonic() - self._touched < ALIVE_EVERY_S:
            return
        self._alive.parent.mkdir(parents=True, exist_ok=True)
        self._alive.touch()
        self._touched = time.monotonic()


async def recover(
    store: Store, notifier: Notifier, desk: ApprovalDesk, runner: str | None = None
) -> list[Task]:
    """At start: questions nobody waits for expire, turns this process (``runner``) left
    running become interrupted and each owner gets one message listing them, all in one
    transaction (a crash here leaves it all to the next start); queued turns are
    re-submitted by the intake. Turns of other live workers are left alone."""
    async with store.atomic():
        await desk.expire_after_restart(runner)
        interrupted = await store.tasks.interrupt_running(runner)
        await store.claims.unsubmit_queued()
        by_chat: dict[int, list[Task]] = defaultdict(list)
        for task in interrupted:
            by_chat[task.chat_id].append(task)
            await store.audit.record("interrupted", task.owner_id, task.id)
            await notifier.ack_status(task)
        await notifier.retire_live([t.id for t in interrupted], "progress")
        for chat_id, tasks in by_chat.items():
            await notifier.interrupted(chat_id, tasks)
        failpoints.hit("recover.before_commit")
    for chat_id, tasks in by_chat.items():
        log.info("chat %s: %s task(s) interrupted by a restart", chat_id, len(tasks))
    return interrupted
