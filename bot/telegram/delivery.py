"""The outbox's delivery, in the bot process only: the rows producers queued (``Outbox``) go to
Telegram one at a time in order per chat, paced to Telegram's limits (about 1/s per private
chat, 20/min per group, under 25/s overall). 429s wait their retry_after per chat; 5xx, HTML
error pages and network errors back off; a newer edit of a message supersedes a pending older
one; rows left when the bot dies are delivered after restart; an undeliverable row (the user
blocked the bot) is recorded as failed, not retried forever."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from aiogram import Bot
from aiogram.exceptions import (
    AiogramError,
    TelegramBadRequest,
    TelegramForbiddenError,
    TelegramNotFound,
    TelegramRetryAfter,
)
from aiogram.types import BufferedInputFile, ForceReply, InlineKeyboardMarkup

from bot.errors import DetachError
from bot.models import MessageKind, OutboxOp
from bot.store import Store
from bot.store.db import utcnow
from bot.store.outbox import OutboxRow
from bot.telegram.markup import Keyboard
from bot.telegram.outbox import Outbox
from bot.telegram.pacing import CHAT_BURST, Pace
from bot.telegram.render import plain
from bot.telegram.retry import NO_RETRY
from bot.telegram.topics import Topics

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 12
MAX_BACKOFF_S = 60.0
RECORD_WAIT_S = 10.0  # a stop waits this long for a sent message's record


class Delivery:
    def __init__(
        self,
        *,
        store: Store,
        outbox: Outbox,
        bot: Bot,
        chat_interval_s: float = 1.0,
        group_interval_s: float = 3.0,
        per_second: float = 25.0,
        chat_burst: int = CHAT_BURST,
        topics: Topics | None = None,
        agents_first: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``topics``: a task's messages go to its forum topic (None: always the chat).
        ``agents_first``: awaited (it is bounded) before each pass: the turns starting in this
        process spawn their agents before the pass's work takes the loop."""
        self._agents_first = agents_first
        self._store = store
        self._topics = topics
        self._outbox = outbox
        self._bot = bot
        self._pace = Pace(chat_interval_s, group_interval_s, per_second, chat_burst)

    async def run_forever(self) -> None:
        NO_RETRY.set(True)  # this loop does its own pacing and retries
        self._outbox.delivered_here()
        wake = self._outbox.wake
        while True:
            # once round the loop first: a turn submitted with the row that woke this (a task
            # and its acknowledgement) takes its slot, and the pass then waits for its agent
            await asyncio.sleep(0)
            if self._agents_first is not None:
                await self._agents_first()
            wake.clear()  # before the pass: a row queued during it wakes the next one
            try:
                wait_s = await self._deliver_due()
            except Exception:  # a broken row or a database hiccup must not stop delivery
                log.exception("outbox pass failed")
                wait_s = 1.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), wait_s)

    async def _deliver_due(self) -> float:
        """Deliver the oldest row of every chat that may send now; seconds to sleep."""
        first = {row.chat_id: row for row in await self._store.outbox.due()}
        if not first:
            return 1.0
        soonest = 1.0
        for chat_id, row in first.items():
            ready_in = self._pace.ready_in(chat_id)
            if ready_in <= 0:
                await self._deliver(row)
                ready_in = self._pace.ready_in(chat_id)
            soonest = min(soonest, ready_in)
        return max(soonest, 0.0)  # new rows wake the worker earlier

    async def _deliver(self, row: OutboxRow) -> None:
        await self._pace.take()
        try:
            message_id = await self._call(row)
        except TelegramRetryAfter as exc:
            self._pace.told_to_wait(row.chat_id, float(exc.retry_after))
            return
        except TelegramForbiddenError as exc:
            await self._give_up(row, f"forbidden: {exc.message}")
            return
        except (TelegramBadRequest, TelegramNotFound) as exc:
            await self._bad_request(row, exc.message)
            return
        except AiogramError as exc:
            await self._back_off(row, type(exc).__name__)
            return
        except Exception as exc:  # a row that cannot be built must not block the queue
            await self._give_up(row, f"{type(exc).__name__}: {exc}")
            return
        if row.op != OutboxOp.DELETE:  # Telegram paces what a chat is sent, not what is removed
            self._pace.sent(row.chat_id)
        # Telegram has the message: record it even if delivery is being stopped (a shutdown),
        # or the next start sends it again and a reply to it finds no task. On aiosqlite the
        # record's statements yield, so a cancel could land between the send and its record.
        record = asyncio.ensure_future(self._record(row, message_id))
        try:
            await asyncio.shield(record)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(record), RECORD_WAIT_S)
            raise

    async def _record(self, row: OutboxRow, message_id: int | None) -> None:
        async with self._store.atomic():  # delivered and linked at once: a reply finds it
            await self._store.outbox.sent(row.id, message_id)
            if row.task_id is not None and message_id is not None:
                await self._store.links.link(
                    row.chat_id, message_id, row.task_id, row.link_kind or MessageKind.MESSAGE
                )
            if row.op == OutboxOp.SEND and message_id is not None:
                await self._catch_up(row)
        self._outbox.resolve(row.id, message_id)

    async def _catch_up(self, row: OutboxRow) -> None:
        """A message rewritten while it was on its way (its row's payload changed after this
        pass read it: a "cancelling…" the card took over) is edited to what its row says."""
        now = await self._store.outbox.get(row.id)
        if now is None or now.payload.get("force_reply"):
            return
        text, markup = now.payload.get("text"), now.payload.get("markup")
        if (text, markup) == (row.payload.get("text"), row.payload.get("markup")):
            return
        rows = (markup or {}).get("inline_keyboard") or []
        await self._outbox.edit(row.chat_id, None, str(text), Keyboard.from_json(rows), row.id)

    async def _call(self, row: OutboxRow) -> int | None:
        """The Telegram call a row stands for; the message id it produced or touched."""
        bot = self._bot
        p = row.payload
        thread_id, opened = None, False
        if self._topics is not None and row.op in (OutboxOp.SEND, OutboxOp.DOCUMENT):
            thread_id, opened = await self._topics.thread_for(row)
        if row.op == OutboxOp.SEND:
            message = await bot.send_message(
                row.chat_id,
                p["text"],
                message_thread_id=thread_id,
                parse_mode="HTML" if p.get("html") else None,
                reply_markup=_markup(p),
                # the message that started a task is not in the topic the task just opened
                reply_to_message_id=None if opened else p.get("reply_to"),
                allow_sending_without_reply=True,
                disable_notification=p.get("silent") or None,
            )
            return message.message_id
        if row.op == OutboxOp.DOCUMENT:
            message = await bot.send_document(
                row.chat_id,
                BufferedInputFile(base64.b64decode(p["data"]), filename=p["filename"]),
                message_thread_id=thread_id,
                caption=p.get("caption"),
                parse_mode="HTML" if p.get("html", True) else None,
                disable_notification=p.get("silent") or None,
            )
            return message.message_id
        if row.op == OutboxOp.EDIT:
            return await self._edit(bot, row)
        if row.op == OutboxOp.MARKUP:
            return await self._edit_markup(bot, row)
        if row.op == OutboxOp.CLOSE_TOPIC:
            if self._topics is not None:
                await self._topics.close(row)
            return None
        message_id = p.get("message_id")
        if message_id is None:  # retired: the row it names may never have been sent
            message_id = await self._store.outbox.message_id_of(int(p["row_id"]))
            if message_id is None:
                return None
        await bot.delete_message(chat_id=row.chat_id, message_id=message_id)
        return int(message_id)

    async def _edit(self, bot: Bot, row: OutboxRow) -> int:
        p = row.payload
        message_id = p.get("message_id")
        if not message_id and p.get("row_id") is not None:
            message_id = await self._store.outbox.message_id_of(int(p["row_id"]))
        if not message_id:
            raise _Undeliverable("the message to edit was never sent")
        markup = _markup(p)
        await bot.edit_message_text(
            text=p["text"],
            chat_id=row.chat_id,
            message_id=message_id,
            reply_markup=markup if isinstance(markup, InlineKeyboardMarkup) else None,
        )
        return int(message_id)

    async def _edit_markup(self, bot: Bot, row: OutboxRow) -> int:
        message_id = await self._store.outbox.message_id_of(int(row.payload["row_id"]))
        if not message_id:
            raise _Undeliverable("the message to change was never sent")
        markup = _markup(row.payload)
        await bot.edit_message_reply_markup(
            chat_id=row.chat_id,
            message_id=message_id,
            reply_markup=markup if isinstance(markup, InlineKeyboardMarkup) else None,
        )
        return int(message_id)

    async def _bad_request(self, row: OutboxRow, message: str) -> None:
        field = {OutboxOp.SEND: "text", OutboxOp.DOCUMENT: "caption"}.get(row.op)  # type: ignore[call-overload]
        if field and row.payload.get("html", True) and "parse" in message.lower():
            log.info("outbox row %s: HTML rejected (%s); sending plain text", row.id, message)
            await self._store.outbox.replace_payload(
                row.id,
                {**row.payload, "html": False, field: plain(row.payload[field] or "")[:4096]},
            )
            return
        if "not modified" in message:
            await self._store.outbox.sent(row.id, row.payload.get("message_id"))
            return
        to_chat = await self._topics.fallback(row, message) if self._topics else None
        if to_chat is not None:  # its topic is gone: the chat itself, never lost
            await self._store.outbox.replace_payload(row.id, to_chat)
            return
        await self._give_up(row, message)

    async def _back_off(self, row: OutboxRow, error: str) -> None:
        attempts = row.attempts + 1
        if attempts >= MAX_ATTEMPTS:
            await self._give_up(row, f"gave up after {attempts} attempts: {error}")
            return
        delay = min(2.0 ** (attempts - 1), MAX_BACKOFF_S)
        log.info("outbox row %s: %s; retry %s in %.0fs", row.id, error, attempts, delay)
        await self._store.outbox.retry_later(
            row.id, attempts, utcnow() + timedelta(seconds=delay), error
        )

    async def _give_up(self, row: OutboxRow, error: str) -> None:
        log.warning("outbox row %s to chat %s not deliverable: %s", row.id, row.chat_id, error)
        await self._store.outbox.failed(row.id, error)
        self._outbox.resolve(row.id, None)


def _markup(payload: dict[str, Any]) -> InlineKeyboardMarkup | ForceReply | None:
    if not payload.get("markup"):
        return None
    kind = ForceReply if payload.get("force_reply") else InlineKeyboardMarkup
    return kind.model_validate(payload["markup"])


class _Undeliverable(DetachError):
    """A row that cannot be sent (what it edits was never sent): given up, its chat goes on."""
