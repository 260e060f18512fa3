"""The durable outbox, producers' side: every send, edit, delete and document is a row first
(``bot.telegram.delivery`` delivers them, in the bot process only). A document's bytes are part
of its row, so a scale-out worker on another machine can queue one too; nothing here imports a
Telegram library. (Callback-query answers are not messages: they go straight to Telegram while
the tap is fresh.)"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from typing import Any

from bot import failpoints
from bot.models import MessageKind, OutboxOp
from bot.store import Store
from bot.store.outbox import PENDING
from bot.telegram.markup import ForceReply, Keyboard, Markup, markup_json

log = logging.getLogger(__name__)
POLL_S = 0.2


class Outbox:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._waiters: dict[int, asyncio.Future[int | None]] = {}
        self.wake = asyncio.Event()  # set when a row is queued: the delivery looks at once
        self._delivering = False  # a scale-out worker queues rows; the bot delivers them

    def delivered_here(self) -> None:
        """This process delivers the rows (the bot): ``delivered`` waits for ``resolve``."""
        self._delivering = True

    def resolve(self, row_id: int, message_id: int | None) -> None:
        """Row ``row_id`` was delivered as ``message_id`` (None: it failed)."""
        future = self._waiters.pop(row_id, None)
        if future is not None and not future.done():
            future.set_result(message_id)

    async def send(
        self,
        chat_id: int,
        text: str,
        *,
        markup: Markup | None = None,
        reply_to: int | None = None,
        html: bool = True,
        task_id: int | None = None,
        link_kind: MessageKind | None = None,
        silent: bool = False,
        about: dict[str, Any] | None = None,
        thread_id: int | None = None,
    ) -> int:
        """Queue a message; returns the row id (``delivered`` gives its message id).
        ``silent``: delivered without a notification (``disable_notification``). ``about``:
        what the message tells of (its turn…), kept with it for later edits, never sent.
        ``thread_id``: the forum topic it answers in (else a task's message goes to the
        task's topic, if it has one: ``bot.telegram.topics``)."""
        payload: dict[str, Any] = {
            "text": text,
            "html": html,
            "reply_to": reply_to,
            "markup": markup_json(markup),
            "force_reply": isinstance(markup, ForceReply),
            "silent": silent,
        }
        if about:
            payload["about"] = about
        if thread_id:
            payload["thread"] = thread_id
        row_id = await self._store.outbox.add(chat_id, OutboxOp.SEND, payload, task_id, link_kind)
        self._wait_for(row_id)
        self._store.after_commit(self.wake.set)  # a row in a transaction waits for it
        return row_id

    async def send_document(
        self,
        chat_id: int,
        data: bytes,
        filename: str,
        caption: str,
        *,
        task_id: int | None = None,
        link_kind: MessageKind | None = None,
        silent: bool = False,
    ) -> int:
        """Queue a file; its bytes are stored with the row, so a restart delivers it too."""
        payload = {  # the store redacts the caption; the bytes are redacted here
            "data": base64.b64encode(self._store.redact.document(data)).decode(),
            "filename": filename,
            "caption": caption,
            "silent": silent,
        }
        row_id = await self._store.outbox.add(
            chat_id, OutboxOp.DOCUMENT, payload, task_id, link_kind
        )
        self._wait_for(row_id)
        self._store.after_commit(self.wake.set)  # a row in a transaction waits for it
        return row_id

    async def close_topic(self, chat_id: int, task_id: int) -> None:
        """The archived task's forum topic is closed (or, in a private chat, says so)."""
        await self._store.outbox.queue(chat_id, OutboxOp.CLOSE_TOPIC, {}, task_id, None)
        self._store.after_commit(self.wake.set)

    def _wait_for(self, row_id: int) -> None:
        if self._delivering:
            self._waiters[row_id] = asyncio.get_running_loop().create_future()

    async def edit(
        self,
        chat_id: int,
        message_id: int | None,
        text: str,
        markup: Keyboard | None = None,
        row_id: int | None = None,
    ) -> None:
        """Edit a message, or the message that send-row ``row_id`` became."""
        payload = {
            "message_id": message_id,
            "row_id": row_id,
            "text": text,
            "markup": markup_json(markup),
        }
        key = f"{chat_id}:{message_id}" if message_id is not None else f"{chat_id}:r{row_id}"
        await self._store.outbox.queue(
            chat_id, OutboxOp.EDIT, payload, None, None, coalesce_key=key
        )
        self._store.after_commit(self.wake.set)

    async def edit_markup(self, chat_id: int, row_id: int, markup: Keyboard | None) -> None:
        """Change only the buttons of the message send-row ``row_id`` became (None: none)."""
        payload = {"row_id": row_id, "markup": markup_json(markup)}
        key = f"{chat_id}:r{row_id}:markup"
        await self._store.outbox.queue(
            chat_id, OutboxOp.MARKUP, payload, None, None, coalesce_key=key
        )
        self._store.after_commit(self.wake.set)

    async def retire(self, chat_id: int, row_id: int) -> None:
        """Remove the message send-row ``row_id`` became, or make sure it is never sent; its
        pending edits are dropped. Needs no message id, so it never waits for delivery. One
        transaction: a row marked retired is one a takeover's sweep passes by, so a process
        killed between the two writes must not leave it marked with no deletion queued."""
        async with self._store.atomic():
            await self._store.outbox.retire(row_id)
            failpoints.hit("retire.before_delete")
            await self._store.outbox.queue(
                chat_id,
                OutboxOp.DELETE,
                {"row_id": row_id},
                None,
                None,
                coalesce_key=f"{chat_id}:r{row_id}",
            )
            self._store.after_commit(self.wake.set)

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
            self.wake.set()
            await asyncio.sleep(0.02)
        return True
