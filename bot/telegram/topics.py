"""A topic per task, in the bot process's delivery: in a chat with forum topics (the bot's
private chat when the owner turned topic mode on in @BotFather, which ``getMe`` reports as
``has_topics_enabled``; a supergroup whose ``getChat`` says ``is_forum``) a task's first
message opens its topic (``createForumTopic``, named by the task's label), and every message of
the task goes there (``message_thread_id``); a sub-task's go to its root task's topic (a tree
is one thread). ``DETACH_TOPICS=project``: one topic per working
directory instead; ``off``: the chat itself. A topic that cannot be opened (no right to manage
topics, topics turned off meanwhile) leaves the task in the chat, as without topics; a topic
Telegram no longer knows (deleted) sends the message to the chat instead, never loses it.

Archiving closes the topic: ``closeForumTopic`` in a supergroup; the Bot API documents that
method for supergroups only, so in a private chat the topic is renamed to say it."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from aiogram import Bot
from aiogram.exceptions import (
    ClientDecodeError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNotFound,
)

from bot.models import MessageKind, OutboxOp, Task, TopicMode
from bot.store import Store
from bot.store.outbox import OutboxRow
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)
RECHECK_S = 60.0  # whether a chat has topics is asked again after this long
NAME_MAX = 128  # Telegram's limit on a topic's name
KEYS_KEPT = 4096  # tasks whose topic is known without a store read
REFUSED = (TelegramBadRequest, TelegramForbiddenError, TelegramNotFound)
# what Telegram answers a send to a topic that is gone, or closed to the bot
THREAD_GONE = ("message thread not found", "topic_deleted", "topic_closed")


class Topics:
    def __init__(
        self,
        store: Store,
        bot: Bot,
        texts: Texts,
        mode: TopicMode,
        recheck_s: float = RECHECK_S,
    ) -> None:
        self._store = store
        self._bot = bot
        self._texts = texts
        self._mode = mode
        self._recheck_s = recheck_s
        self._forums: dict[int, tuple[bool, float]] = {}  # chat -> (has topics, asked at)
        # task -> its topic's key (None: the chat): a task is placed once, here (deliveries run
        # in the bot process only), so a message after its first makes no store trip for it
        self._keys: dict[int, str | None] = {}

    async def thread_for(self, row: OutboxRow) -> tuple[int | None, bool]:
        """(the topic a row's message goes to, or None: the chat; whether this call opened
        it). A row that names its thread (a handler's answer in a topic) keeps it; a task's
        message goes to the task's topic, opened with its first message."""
        if "thread" in row.payload:
            return row.payload["thread"] or None, False
        if row.task_id is None or row.link_kind == MessageKind.INTERRUPTED:
            return None, False  # the interrupted list names many tasks: the chat
        placed, key = await self._key_of(row.task_id)
        if not placed:
            return await self._place(row.chat_id, row.task_id)
        topic = await self._store.topics.get(row.chat_id, key) if key else None
        return (topic.thread_id if topic else None), False

    async def _key_of(self, task_id: int) -> tuple[bool, str | None]:
        if task_id in self._keys:
            return True, self._keys[task_id]
        placed, key = await self._store.topics.key_of(task_id)
        if placed:
            self._known(task_id, key)
        return placed, key

    def _known(self, task_id: int, key: str | None) -> None:
        if len(self._keys) >= KEYS_KEPT:
            self._keys.clear()  # read again from the store as they are needed
        self._keys[task_id] = key

    async def _placed(self, task_id: int, chat_id: int, key: str | None) -> None:
        await self._store.topics.place(task_id, chat_id, key)
        self._known(task_id, key)

    async def _place(self, chat_id: int, task_id: int) -> tuple[int | None, bool]:
        """A task's first message: where it goes (a chat without topics: the chat, with no
        read of the task)."""
        task = None
        if self._mode is not TopicMode.OFF and await self._forum(chat_id):
            task = await self._store.tasks.get(task_id)
        if task is None:
            await self._placed(task_id, chat_id, None)
            return None, False
        key, name = self._key_and_name(await self._root(task))
        topic = await self._store.topics.get(chat_id, key)
        if topic is not None and topic.thread_id is not None and not topic.closed:
            await self._placed(task_id, chat_id, key)  # a directory's topic
            return topic.thread_id, False
        try:
            created = await self._bot.create_forum_topic(chat_id, name)
        except REFUSED as exc:
            log.warning("task %s: no topic in chat %s (%s); the chat", task_id, chat_id, exc)
            await self._placed(task_id, chat_id, None)
            return None, False
        thread_id = created.message_thread_id
        await self._store.topics.opened(chat_id, key, thread_id, name)
        await self._placed(task_id, chat_id, key)
        log.info("task %s: topic %s opened in chat %s", task_id, thread_id, chat_id)
        return thread_id, True

    async def _root(self, task: Task) -> Task:
        """The task whose topic a sub-task shares (its tree is one thread): the top of its
        lineage (a few levels: DETACH_SUBTASK_DEPTH)."""
        for _ in range(4):
            parent = await self._store.tasks.get(task.parent_id) if task.parent_id else None
            if parent is None:
                break
            task = parent
        return task

    def _key_and_name(self, task: Task) -> tuple[str, str]:
        if self._mode is TopicMode.PROJECT:
            folder = Path(task.cwd).name or task.cwd
            return f"cwd:{task.cwd}", f"📁 {folder}"[:NAME_MAX]
        return f"task:{task.id}", task.label[:NAME_MAX]

    async def _forum(self, chat_id: int) -> bool:
        """Whether the chat has topics: asked of Telegram, again after ``recheck_s``."""
        known = self._forums.get(chat_id)
        now = time.monotonic()
        if known is not None and now - known[1] < self._recheck_s:
            return known[0]
        try:
            if chat_id > 0:  # a private chat: the bot's topic mode (getMe, not its cache)
                on = bool((await self._bot.get_me()).has_topics_enabled)
            else:
                on = bool((await self._bot.get_chat(chat_id)).is_forum)
        except (*REFUSED, ClientDecodeError) as exc:  # a network error: the row is retried
            log.info("chat %s: whether it has topics is unknown (%s)", chat_id, exc)
            on = False
        self._forums[chat_id] = (on, now)
        return on

    async def fallback(self, row: OutboxRow, error: str) -> dict[str, Any] | None:
        """The payload that sends a row to the chat itself when Telegram refused its topic
        (gone or closed); None when the refusal was about something else."""
        if row.op not in (OutboxOp.SEND, OutboxOp.DOCUMENT):
            return None
        if not any(marker in error.lower() for marker in THREAD_GONE):
            return None
        thread_id, _ = await self.thread_for(row)
        if thread_id is None:
            return None
        if "not found" in error.lower() or "deleted" in error.lower():
            await self._store.topics.gone(row.chat_id, thread_id)
        log.info("outbox row %s: topic %s refused (%s); the chat", row.id, thread_id, error)
        return {**row.payload, "thread": 0}

    async def close(self, row: OutboxRow) -> None:
        """Archived: the task's topic is closed (a supergroup) or renamed (a private chat),
        unless other tasks of a shared (directory) topic are still open."""
        assert row.task_id is not None
        placed, key = await self._key_of(row.task_id)
        topic = await self._store.topics.get(row.chat_id, key) if key else None
        if topic is None or topic.thread_id is None or topic.closed:
            return
        if key is not None and await self._store.topics.open_tasks(row.chat_id, key):
            return
        if row.chat_id < 0:
            await self._bot.close_forum_topic(row.chat_id, topic.thread_id)
        else:
            task = await self._store.tasks.get(row.task_id)
            locale = task.locale if task is not None else "en"
            name = self._texts.raw(locale, "topic.archived_name", name=topic.name)
            await self._bot.edit_forum_topic(row.chat_id, topic.thread_id, name=name[:NAME_MAX])
        await self._store.topics.closed(row.chat_id, topic.key)
        log.info("task %s: topic %s closed", row.task_id, topic.thread_id)
