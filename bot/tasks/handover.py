"""Carrying a task that waits for its engine's usage limit over to another engine, from the
buttons of its waiting notice: a new session on that engine, in the same directory (worktree)
and under the same label, whose first prompt holds the goal, a summary of the transcript so far
and the directory's uncommitted changes. Or keeping the wait (the notice keeps Cancel only)."""

from __future__ import annotations

import logging
from collections.abc import Collection

from bot.errors import TaskStateError, UserInputError
from bot.models import Engine, Task, TaskStatus
from bot.money.desk import MoneyDesk
from bot.store import Store
from bot.tasks.chat import ChatSettings
from bot.tasks.lookup import TaskLookup
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts
from bot.turns.continuation import handover_prompt
from bot.turns.outcome import local_time
from bot.turns.queue import TurnQueue
from executors.gitguard import GitGuard
from executors.registry import may_move

log = logging.getLogger(__name__)


class Handover:
    def __init__(
        self,
        *,
        lookup: TaskLookup,
        chat: ChatSettings,
        money: MoneyDesk,
        engines: Collection[Engine],
        store: Store,
        queue: TurnQueue,
        notifier: Notifier,
        texts: Texts,
        git: GitGuard,
    ) -> None:
        """``engines``: those tasks may use here."""
        self._git = git
        self._lookup = lookup
        self._chat = chat
        self._money = money
        self._engines = engines
        self._texts = texts
        self._store = store
        self._queue = queue
        self._notifier = notifier

    async def run_on(self, user_id: int, task_id: int, engine: Engine) -> Task:
        """The owner's task that waits for its engine's limit goes on with ``engine`` now;
        refused when it no longer waits, or ``engine`` is unknown, the same, limited too, or
        holds the task's mode more weakly (``may_move``)."""
        task = await self._waiting(user_id, task_id)
        if engine == task.engine or engine not in self._engines:
            raise UserInputError("error.engine_unavailable", engine=engine)
        if not may_move(task.approval_mode, task.engine, engine):
            raise UserInputError(
                "error.engine_weaker", engine=engine.capitalize(), mode=task.approval_mode.value
            )
        until = await self._queue.limited_until(engine)
        if until is not None:
            zone = await self._chat.zone(user_id)
            raise UserInputError(
                "error.engine_limited", engine=engine.capitalize(), resets=local_time(until, zone)
            )
        turn = await self._store.claims.next_queued_turn(task.id)
        if turn is None:
            raise self._not_waiting(task)
        prompt = await handover_prompt(self._store, self._git, task, turn)
        chat = await self._store.chats.get(task.chat_id)
        preset = self._money.preset_for(chat.preset, None, engine)
        async with self._store.atomic():
            moved = await self._store.tasks.move_to_engine(
                task.id,
                turn.id,
                engine,
                prompt,
                preset.name if preset else None,
                preset.model if preset else None,
            )
            if moved is None:  # its limit reset meanwhile: it already goes on
                raise self._not_waiting(task)
            await self._store.audit.record(
                "engine_switched", user_id, task.id, f"{task.engine}->{engine}"
            )
            await self._notifier.engine_switched(moved, task.engine)
            await self._notifier.ack_status(moved)
        log.info("task %s: carried over from %s to %s", task.id, task.engine, engine)
        await self._queue.kick(task.id)
        return moved

    async def keep_waiting(self, user_id: int, task_id: int) -> Task:
        """The owner chose to wait: the notice keeps its Cancel only."""
        task = await self._waiting(user_id, task_id)
        await self._notifier.limit_wait_chosen(task)
        return task

    async def _waiting(self, user_id: int, task_id: int) -> Task:
        task = await self._lookup.get_own(user_id, task_id)
        if task.status is not TaskStatus.WAITING_FOR_LIMIT:
            raise self._not_waiting(task)
        return task

    def _not_waiting(self, task: Task) -> TaskStateError:
        return TaskStateError(
            "error.not_waiting",
            label=task.label,
            status=self._texts.status(task.locale, task.status),
        )
