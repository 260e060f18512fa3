"""Long polling that loses no update: each update is stored in the journal before Telegram is
told it arrived (the next ``getUpdates`` offset confirms it), and removed once its handler
finished. At start, updates a crash cut short are handled again; the handlers are idempotent
where it matters (a command message starts one task, a reply continues a task once).

Updates are handled side by side, but the messages of one chat in the order they arrived: a
message's handler starts once the chat's previous message's handler ended, or
``CHAT_ORDER_S`` after it started waiting (a slow one, a voice note's transcription, holds the
chat's next message no longer). Two quick replies to one task queue their follow-ups in the
order they were sent; a burst of commands makes its tasks in order. Button taps (callback
queries) never wait: a Cancel is not held behind a message."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from aiogram import Bot, Dispatcher
from aiogram.types import Update

from bot.store import Store

log = logging.getLogger(__name__)
TAKEN_MEMORY = 10_000  # update ids remembered per run (Telegram re-sends only the latest)
WIRE_S = 0.1  # after the first getUpdates is asked for: it is on the wire
FIRST_POLL_LIMIT_S = 30.0  # start-up work waits no longer for polling to begin
# passes of the event loop an update's handler gets before polling goes on, then the start of
# any turn it handed to the job pool in them (awaited, bounded: ``turns_started``). Best effort:
# on aiosqlite every store call is a round trip to its thread, so a command's task is usually
# stored, and its agent spawned, after the next getUpdates is asked for (about 0.5 ms a command,
# the price of never running a statement on the loop; waiting for the handlers instead would
# hold every other chat's updates behind the slowest handler of a batch)
HANDLER_PASSES = 2
CHAT_ORDER_S = 5.0  # a chat's message waits no longer for the handler of the one before it


class JournaledDispatcher(Dispatcher):
    def __init__(
        self,
        store: Store,
        polling: asyncio.Event,
        turns_started: Callable[[], Awaitable[None]] | None = None,
        chat_order_s: float = CHAT_ORDER_S,
        **workflow_data: Any,
    ) -> None:
        """``polling`` is set as the first ``getUpdates`` is asked for (``after_first_poll``:
        what start-up work can wait, waits for it). ``turns_started``: returns (bounded) once
        the turns handed to the job pool have started their jobs. ``chat_order_s``: how long a
        chat's message waits for the handler of the one before it."""
        super().__init__(**workflow_data)
        self._chat_order_s = chat_order_s
        self._store = store
        self._polling_began = polling
        self._turns_started = turns_started
        self._replays: set[asyncio.Task[bool]] = set()
        # update ids this run took on: the replay of the journal and a re-delivery of the same
        # unconfirmed update by getUpdates must not run one update twice, let alone at once
        self._taken: set[int] = set()
        self._taken_order: deque[int] = deque()
        # chat id -> set when the handler of the chat's latest message ended (see the module)
        self._chat_tails: dict[int, asyncio.Event] = {}
        self.startup.register(self._replay)

    async def _listen_updates(  # type: ignore[override]
        self, bot: Bot, *args: Any, **kwargs: Any
    ) -> AsyncGenerator[Update, None]:
        # The base generator asks for the next batch (confirming this one) only after the
        # consumer took every update of it; each is stored before it is handed on.
        self._polling_began.set()
        async for update in super()._listen_updates(bot, *args, **kwargs):
            await self._store.journal.keep(update.update_id, _dump(update))
            yield update
            # The consumer made a task of its handler; let it (and what it starts at once, a
            # turn's spawn) run before the next request is built, not behind it.
            for _ in range(HANDLER_PASSES):
                await asyncio.sleep(0)
            if self._turns_started is not None:
                await self._turns_started()

    async def _process_update(
        self, bot: Bot, update: Update, call_answer: bool = True, **kwargs: Any
    ) -> bool:
        if not self._take(update.update_id):
            log.info("update %s is already being handled; skipped", update.update_id)
            return True
        # before the first await: tasks made in arrival order get here in that order
        chat_id, before, mine = self._queue_in_chat(update)
        try:
            if before is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(before.wait(), self._chat_order_s)
            return await super()._process_update(bot, update, call_answer, **kwargs)
        finally:
            if mine is not None:
                mine.set()
                if self._chat_tails.get(chat_id) is mine:
                    del self._chat_tails[chat_id]
            await asyncio.shield(self._store.journal.done(update.update_id))

    def _queue_in_chat(
        self, update: Update
    ) -> tuple[int, asyncio.Event | None, asyncio.Event | None]:
        """A message's place in its chat: (chat id, the event of the message before it, its
        own event). Not a message: no place, nothing to wait for."""
        message = update.message or update.edited_message
        if message is None:
            return 0, None, None
        chat_id = message.chat.id
        before = self._chat_tails.get(chat_id)
        mine = self._chat_tails[chat_id] = asyncio.Event()
        return chat_id, before, mine

    def _take(self, update_id: int) -> bool:
        """True the first time this run sees ``update_id`` (the last TAKEN_MEMORY are kept)."""
        if update_id in self._taken:
            return False
        self._taken.add(update_id)
        self._taken_order.append(update_id)
        if len(self._taken_order) > TAKEN_MEMORY:
            self._taken.discard(self._taken_order.popleft())
        return True

    async def _replay(self, bot: Bot, **kwargs: Any) -> None:
        """Handle again, in order and in the background, what the last run received but did not
        finish handling."""
        pending = await self._store.journal.pending()
        if pending:
            log.info("handling %s update(s) a restart cut short", len(pending))
            kwargs.pop("dispatcher", None)
            task = asyncio.create_task(self._handle_in_order(bot, pending, kwargs))
            self._replays.add(task)
            task.add_done_callback(self._replays.discard)

    async def _handle_in_order(
        self, bot: Bot, pending: list[tuple[int, str]], kwargs: dict[str, Any]
    ) -> bool:
        for _update_id, payload in pending:
            update = Update.model_validate(json.loads(payload), context={"bot": bot})
            await self._process_update(bot, update, dispatcher=self, **kwargs)
        return True


def _dump(update: Update) -> str:
    # ASCII: a lone surrogate in a message survives as an escape instead of failing the store
    return json.dumps(update.model_dump(mode="json", exclude_none=True))


async def after_first_poll(
    polling: asyncio.Event, wire_s: float = WIRE_S, limit_s: float = FIRST_POLL_LIMIT_S
) -> None:
    """Return ``wire_s`` after the first ``getUpdates`` was asked for (a new connection's
    connect and request are on their way by then), or after ``limit_s`` if polling never
    began."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(polling.wait(), limit_s)
    await asyncio.sleep(wire_s)
