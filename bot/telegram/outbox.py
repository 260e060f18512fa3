"""The durable outbox: every send, edit, delete and document the bot makes is a row first, delivered
by one worker in order per chat, paced to Telegram's limits (about 1/s per private chat, 20/min
per group, under 25/s overall). 429s wait their retry_after per chat; 5xx, HTML error pages and
network errors back off; a newer edit of a message supersedes a pending older one; rows left
when the bot dies are delivered after restart; an undeliverable row (the user blocked the bot)
is recorded as failed, not retried forever. A document's bytes are part of its row, so a
scale-out worker on another machine can queue one too. (Callback-query answers are not
messages: they go straight to Telegram while the tap is fresh.)"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
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

from bot.store import Store
from bot.store.db import utcnow
from bot.store.outbox import PENDING, OutboxRow
from bot.telegram.pacing import CHAT_BURST, Pace
from bot.telegram.render import plain
from bot.telegram.retry import NO_RETRY

log = logging.getLogger(__name__)
MAX_ATTEMPTS = 12
MAX_BACKOFF_S = 60.0
POLL_S = 0.2


class Outbox:
    def __init__(
        self,
        store: Store,
        bot: Bot | None,
        chat_interval_s: float = 1.0,
        group_interval_s: float = 3.0,
        per_second: float = 25.0,
        chat_burst: int = CHAT_BURST,
    ) -> None:
        self._store = store
        self._bot = bot
        self._pace = Pace(chat_interval_s, group_interval_s, per_second, chat_burst)
        self._waiters: dict[int, asyncio.Future[int | None]] = {}
        self._wake = asyncio.Event()
        self._delivering = False  # a scale-out worker queues rows; the bot delivers them

    # -- the producers' side ---------------------------------------------------------------
    async def send(
        self,
        chat_id: int,
        text: str,
        *,
        markup: InlineKeyboardMarkup | Any = None,
        reply_to: int | None = None,
        html: bool = True,
        task_id: int | None = None,
        link_kind: str | None = None,
        silent: bool = False,
    ) -> int:
        """Queue a message; returns the row id (``delivered`` gives its message id).
        ``silent``: delivered without a notification (``disable_notification``)."""
        payload = {
            "text": text,
            "html": html,
            "reply_to": reply_to,
            "markup": markup.model_dump(exclude_none=True) if markup else None,
            "force_reply": isinstance(markup, ForceReply),
            "silent": silent,
        }
        row_id = await self._store.outbox.add(chat_id, "send", payload, task_id, link_kind)
        self._wait_for(row_id)
        self._store.after_commit(self._wake.set)  # a row in a transaction waits for it
        return row_id

    async def send_document(
        self,
        chat_id: int,
        data: bytes,
        filename: str,
        caption: str,
        *,
        task_id: int | None = None,
        link_kind: str | None = None,
        silent: bool = False,
    ) -> int:
        """Queue a file; its bytes are stored with the row, so a restart delivers it too."""
        payload = {
            "data": base64.b64encode(data).decode(),
            "filename": filename,
            "caption": caption,
            "silent": silent,
        }
        row_id = await self._store.outbox.add(chat_id, "document", payload, task_id, link_kind)
        self._wait_for(row_id)
        self._store.after_commit(self._wake.set)  # a row in a transaction waits for it
        return row_id

    def _wait_for(self, row_id: int) -> None:
        if self._delivering:
            self._waiters[row_id] = asyncio.get_running_loop().create_future()

    async def edit(
        self,
        chat_id: int,
        message_id: int | None,
        text: str,
        markup: InlineKeyboardMarkup | None = None,
        row_id: int | None = None,
    ) -> None:
        """Edit a message, or the message that send-row ``row_id`` became."""
        payload = {
            "message_id": message_id,
            "row_id": row_id,
            "text": text,
            "markup": markup.model_dump(exclude_none=True) if markup else None,
        }
        key = f"{chat_id}:{message_id}" if message_id is not None else f"{chat_id}:r{row_id}"
        await self._store.outbox.add(chat_id, "edit", payload, None, None, coalesce_key=key)
        self._store.after_commit(self._wake.set)

    async def edit_markup(
        self, chat_id: int, row_id: int, markup: InlineKeyboardMarkup | None
    ) -> None:
        """Change only the buttons of the message send-row ``row_id`` became (None: none)."""
        payload = {
            "row_id": row_id,
            "markup": markup.model_dump(exclude_none=True) if markup else None,
        }
        key = f"{chat_id}:r{row_id}:markup"
        await self._store.outbox.add(chat_id, "markup", payload, None, None, coalesce_key=key)
        self._store.after_commit(self._wake.set)

    async def retire(self, chat_id: int, row_id: int) -> None:
        """Remove the message send-row ``row_id`` became, or make sure it is never sent; its
        pending edits are dropped. Needs no message id, so it never waits for delivery."""
        await self._store.outbox.retire(row_id)
        await self._store.outbox.add(
            chat_id, "delete", {"row_id": row_id}, None, None, coalesce_key=f"{chat_id}:r{row_id}"
        )
        self._store.after_commit(self._wake.set)

    async def delivered(self, row_id: int, timeout_s: float = 120.0) -> int | None:
        """The message id once the row is delivered; None if it failed or took too long."""
        future = self._waiters.get(row_id)
        if future is None:  # another process delivers (this one is a scale-out worker)
            return await self._poll_delivered(row_id, timeout_s)
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            return None

    async def _poll_delivered(self, row_id: int, timeout_s: float) -> int | None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status, message_id = await self._store.outbox.state(row_id)
            if status != PENDING:
                return message_id
            await asyncio.sleep(POLL_S)
        return None

    async def idle(self, timeout_s: float = 30.0) -> bool:
        """True once nothing is pending (for tests and an orderly stop); False after the bound."""
        deadline = time.monotonic() + timeout_s
        while await self._store.outbox.count(PENDING):
            if time.monotonic() >= deadline:
                return False
            self._wake.set()
            await asyncio.sleep(0.02)
        return True

    # -- the worker ------------------------------------------------------------------------
    async def run_forever(self) -> None:
        assert self._bot is not None, "only the bot process delivers"
        NO_RETRY.set(True)  # this worker does its own pacing and retries
        self._delivering = True
        while True:
            self._wake.clear()  # before the pass: a row queued during it wakes the next one
            try:
                wait_s = await self._deliver_due()
            except Exception:  # a broken row or a database hiccup must not stop delivery
                log.exception("outbox pass failed")
                wait_s = 1.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), wait_s)

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
        if row.op != "delete":  # Telegram paces what a chat is sent, not what is removed
            self._pace.sent(row.chat_id)
        async with self._store.atomic():  # delivered and linked at once: a reply finds it
            await self._store.outbox.sent(row.id, message_id)
            if row.task_id is not None and message_id is not None:
                await self._store.links.link(
                    row.chat_id, message_id, row.task_id, row.link_kind or "message"
                )
        self._resolve(row.id, message_id)

    async def _call(self, row: OutboxRow) -> int | None:
        """The Telegram call a row stands for; the message id it produced or touched."""
        bot = self._bot
        assert bot is not None
        p = row.payload
        if row.op == "send":
            message = await bot.send_message(
                row.chat_id,
                p["text"],
                parse_mode="HTML" if p.get("html") else None,
                reply_markup=_markup(p),
                reply_to_message_id=p.get("reply_to"),
                allow_sending_without_reply=True,
                disable_notification=p.get("silent") or None,
            )
            return message.message_id
        if row.op == "document":
            message = await bot.send_document(
                row.chat_id,
                BufferedInputFile(base64.b64decode(p["data"]), filename=p["filename"]),
                caption=p.get("caption"),
                parse_mode="HTML" if p.get("html", True) else None,
                disable_notification=p.get("silent") or None,
            )
            return message.message_id
        if row.op == "edit":
            return await self._edit(bot, row)
        if row.op == "markup":
            return await self._edit_markup(bot, row)
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
        field = {"send": "text", "document": "caption"}.get(row.op)
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
        self._resolve(row.id, None)

    def _resolve(self, row_id: int, message_id: int | None) -> None:
        future = self._waiters.pop(row_id, None)
        if future is not None and not future.done():
            future.set_result(message_id)


def _markup(payload: dict[str, Any]) -> InlineKeyboardMarkup | ForceReply | None:
    if not payload.get("markup"):
        return None
    kind = ForceReply if payload.get("force_reply") else InlineKeyboardMarkup
    return kind.model_validate(payload["markup"])


class _Undeliverable(Exception):
    pass
