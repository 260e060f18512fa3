"""Taking over the turns of a runner that is gone: its lease lapsed (killed, machine lost,
stopped), or it is this process's own earlier incarnation at start. In one transaction: the
runner is marked taken, its running turns become interrupted (cancelled, when a /cancel was
waiting for it), their pending questions expire with their messages edited, their stall
watchdogs' messages lose their buttons, each owner gets one notice naming the runner, with
Resume and Mark failed per task. Of two processes taking over at once, the conditional update
of each turn gives it to one."""

from __future__ import annotations

import logging
from collections import defaultdict

from bot import failpoints
from bot.approvals.desk import ApprovalDesk
from bot.approvals.stalls import close_stalls
from bot.models import MessageKind, Task
from bot.store import Runner, Store
from bot.telegram.notifier import Notifier

log = logging.getLogger(__name__)


class Takeover:
    def __init__(self, store: Store, notifier: Notifier, desk: ApprovalDesk) -> None:
        self._store = store
        self._notifier = notifier
        self._desk = desk

    async def sweep(self) -> int:
        """Take over every lapsed runner that still holds turns; returns how many turns."""
        taken = 0
        for runner_id in await self._store.runners.lapsed_with_turns():
            taken += len(await self.take(runner_id))
        return taken

    async def if_lost(self, task_id: int) -> bool:
        """The runner of ``task_id``'s running turn is gone: its turns are taken over now (a
        /cancel or an answer that waited for it is settled at once). False while it lives."""
        runner_id = await self._store.claims.runner_of(task_id)
        return runner_id is not None and bool(await self.take(runner_id))

    async def take(self, runner_id: str, dead: bool = False) -> list[Task]:
        """Take ``runner_id``'s turns if its lease lapsed (``dead``: known to be gone, this
        process's earlier incarnation); returns the tasks interrupted or cancelled."""
        async with self._store.atomic():
            if not await self._store.runners.take(runner_id, dead):
                return []
            runner = await self._store.runners.get(runner_id)
            interrupted, cancelled, turn_ids = await self._store.recovery.interrupt_runners(
                [runner_id]
            )
            await self._desk.expire(turn_ids, "approval.runner_lost")
            await close_stalls(self._store, self._notifier, turn_ids)
            for task in cancelled:
                await self._cancelled(task)
            await self._notifier.retire_live(
                [t.id for t in [*interrupted, *cancelled]], MessageKind.PROGRESS
            )
            await self._report(runner, interrupted)
            failpoints.hit("takeover.before_commit")
        if turn_ids:
            log.info(
                "runner %s: took over %s turn(s): %s interrupted, %s cancelled",
                runner_id,
                len(turn_ids),
                [t.id for t in interrupted],
                [t.id for t in cancelled],
            )
        return [*interrupted, *cancelled]

    async def _cancelled(self, task: Task) -> None:
        """A /cancel waited for this runner: the turn is cancelled now, and says so."""
        await self._store.audit.record("cancelled_on_takeover", task.owner_id, task.id)
        turn = await self._store.tasks.last_turn(task.id)
        if turn is not None:
            await self._notifier.turn_finished(task, turn)
        await self._notifier.ack_status(task)

    async def _report(self, runner: Runner | None, tasks: list[Task]) -> None:
        by_chat: dict[int, list[Task]] = defaultdict(list)
        for task in tasks:
            by_chat[task.chat_id].append(task)
            await self._store.audit.record("interrupted", task.owner_id, task.id)
            await self._notifier.ack_status(task)
        for chat_id, chat_tasks in by_chat.items():
            await self._notifier.interrupted(chat_id, chat_tasks, runner)
