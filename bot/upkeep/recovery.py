"""Restart recovery of the one process (SQLite): what it left running is interrupted, and said."""

from __future__ import annotations

import logging
from collections import defaultdict

from bot import failpoints
from bot.approvals.desk import ApprovalDesk
from bot.approvals.stalls import close_stalls
from bot.models import MessageKind, Task
from bot.store import Store
from bot.telegram.notifier import Notifier

log = logging.getLogger(__name__)


async def recover(store: Store, notifier: Notifier, desk: ApprovalDesk) -> list[Task]:
    """At the start of the one process (SQLite): questions nobody waits for expire, stall
    watchdogs' messages lose their buttons, turns left running become interrupted and each
    owner gets one message listing them, all in one transaction (a crash here leaves it all
    to the next start); queued turns are re-submitted by the intake. (On a shared database
    a runner's turns are taken over by ``bot.fleet.takeover`` instead.)"""
    async with store.atomic():
        await desk.expire()
        await close_stalls(store, notifier)
        interrupted = await store.recovery.interrupt_running()
        await store.claims.unsubmit_queued()
        by_chat: dict[int, list[Task]] = defaultdict(list)
        for task in interrupted:
            by_chat[task.chat_id].append(task)
            await store.audit.record("interrupted", task.owner_id, task.id)
            await notifier.ack_status(task)
        await notifier.retire_live([t.id for t in interrupted], MessageKind.PROGRESS)
        for chat_id, tasks in by_chat.items():
            await notifier.interrupted(chat_id, tasks)
        failpoints.hit("recover.before_commit")
    for chat_id, tasks in by_chat.items():
        log.info("chat %s: %s task(s) interrupted by a restart", chat_id, len(tasks))
    return interrupted
