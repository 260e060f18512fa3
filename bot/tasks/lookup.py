"""Finding a user's tasks: by id, by a message that started or continued one, by its forum
topic, and the list /tasks shows. Somebody else's task is reported exactly like a missing one
(``TaskNotFound``), so a user learns nothing of other users' tasks."""

from __future__ import annotations

import asyncio

from bot.errors import TaskNotFound, TaskStateError, UserInputError
from bot.models import Task, TaskStatus
from bot.store import Store
from bot.telegram.texts import Texts

LIST_LIMIT = 15
LINK_POLL_S = 0.05


class TaskLookup:
    def __init__(self, store: Store, texts: Texts) -> None:
        self._store = store
        self._texts = texts

    async def task_linked(self, chat_id: int, message_id: int) -> int | None:
        """The task ``message_id`` of ``chat_id`` started or continued, if any."""
        return await self._store.links.task_for(chat_id, message_id)

    async def get_own(self, user_id: int, task_id: int) -> Task:
        """A task of this user; somebody else's task is reported exactly like a missing one."""
        task = await self._store.tasks.get(task_id)
        if task is None or task.owner_id != user_id:
            raise TaskNotFound(f"#{task_id}")
        return task

    async def get_idle(self, user_id: int, task_id: int) -> Task:
        """A task of this user that is neither queued nor running."""
        task = await self.get_own(user_id, task_id)
        if task.status.active:
            raise TaskStateError(
                "error.still_active",
                label=task.label,
                status=self._texts.status(task.locale, task.status),
            )
        return task

    async def task_for_message(
        self, chat_id: int, message_id: int, user_id: int, wait_s: float = 0.0
    ) -> Task | None:
        """The task a message belongs to. ``wait_s``: how long to wait for the link of one of
        the bot's own messages (a reply can arrive before the bot has recorded what it sent)."""
        deadline = asyncio.get_running_loop().time() + wait_s
        while (task_id := await self._store.links.task_for(chat_id, message_id)) is None:
            if asyncio.get_running_loop().time() >= deadline:
                return None
            await asyncio.sleep(LINK_POLL_S)
        return await self.get_own(user_id, task_id)

    async def task_in_topic(self, chat_id: int, thread_id: int, user_id: int) -> Task | None:
        """The task a message in a forum topic continues: the user's newest of the topic's
        tasks (a directory's topic holds several); None in a topic no task opened. A topic
        of only somebody else's tasks is reported like a missing task."""
        task_ids = await self._store.topics.tasks_in(chat_id, thread_id)
        for task_id in task_ids:
            task = await self._store.tasks.get(task_id)
            if task is not None and task.owner_id == user_id:
                return task
        return await self.get_own(user_id, task_ids[0]) if task_ids else None

    async def list(self, user_id: int) -> list[Task]:
        """The user's tasks but the archived ones (at most ``LIST_LIMIT``), active first."""
        statuses = [s for s in TaskStatus if s is not TaskStatus.ARCHIVED]
        tasks = await self._store.tasks.list_for(user_id, statuses, LIST_LIMIT)
        return sorted(tasks, key=lambda t: (not t.status.active, -t.id))

    async def archived_count(self, user_id: int) -> int:
        return await self._store.tasks.count_for(user_id, [TaskStatus.ARCHIVED])


def parse_task_id(ref: str, command: str) -> int:
    """``12`` or ``#12`` -> 12; anything else is a clear error naming the command."""
    text = ref.strip().lstrip("#")
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise UserInputError("error.bad_task_id", command=command)
    return int(text)
