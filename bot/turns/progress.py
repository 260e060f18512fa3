"""Live progress of a running turn: one silent message, sent only once the turn has run
``delay_s`` (a quick turn gets none), edited in place when its text changed and no more often
than every ``interval_s``; removed when the turn ends (the completion card is a new message)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable

from bot.events import AgentEvent, Retrying, TextEmitted, ToolCalled, UsageUpdated
from bot.models import MessageKind, Task, TaskStatus
from bot.money.pricing import Meter
from bot.telegram.notifier import Notifier
from bot.telegram.render import duration, money, shorten

log = logging.getLogger(__name__)
SAYS_CHARS = 160  # the agent's latest line, as much as a phone shows at a glance
STEP_CHARS = 200
QUEUED_WAIT_S = 10.0  # the end of a turn waits this long for its message's row, if queueing


class Progress:
    def __init__(
        self,
        notifier: Notifier,
        task: Task,
        interval_s: float,
        meter: Meter,
        *,
        delay_s: float = 0.0,
        held: Callable[[], Awaitable[bool]] | None = None,
        asking: Callable[[], bool] | None = None,
    ) -> None:
        """``held``: whether this process still runs the turn (scale-out: another may have
        taken it over; then the message is not sent, nor edited); ``asking``: whether the
        turn waits for its owner's answer now (the line says so)."""
        self._held = held
        self._asking = asking
        self._notifier = notifier
        self._task = task
        self._interval_s = interval_s
        self._delay_s = delay_s
        self._meter = meter
        self._started = time.monotonic()
        self._step = ""
        self._says = ""
        self._steps = 0
        self._cost: float | None = None
        self._retry: Retrying | None = None  # the endpoint failed; cleared by what comes next
        self._unpriced = False
        self._row_id = 0
        self._shown = ""
        self._last_edit = 0.0
        self._ticker: asyncio.Task[None] | None = None
        self._queueing: asyncio.Future[int] | None = None

    def text(self) -> str:
        """Label, elapsed time, steps (plural forms per language), cost; what the agent said
        last; the tool it runs now."""
        loc, elapsed = self._task.locale, duration(time.monotonic() - self._started)
        step = self._notifier.text(loc, "progress.step", step=self._step) if self._step else ""
        says = self._notifier.text(loc, "progress.says", text=self._says) if self._says else ""
        key = "progress.cost_unpriced" if self._unpriced else "progress.cost"
        cost = self._notifier.text(loc, key, cost=money(self._cost)) if self._cost else ""
        steps = self._notifier.texts.plural(loc, "progress.steps", self._steps)
        head = self._notifier.text(
            loc, "progress.running", label=self._task.label, elapsed=elapsed, steps=steps
        )
        retry = self._retry
        retrying = (
            self._notifier.text(
                loc, "progress.retrying", status=retry.status, attempt=retry.attempt
            )
            if retry
            else ""
        )
        asking = self._asking is not None and self._asking()
        waits = self._notifier.text(loc, "progress.asking") if asking else ""
        return head + cost + retrying + waits + says + step

    async def __aenter__(self) -> Progress:
        """Return at once: the agent must not wait for Telegram."""
        self._ticker = asyncio.create_task(self._tick())
        return self

    def observe(self, event: AgentEvent) -> None:
        self._retry = event if isinstance(event, Retrying) else None
        if isinstance(event, TextEmitted) and event.text.strip():
            last = event.text.strip().splitlines()[-1]
            self._says = shorten(last, SAYS_CHARS, one_line=True)
        elif isinstance(event, ToolCalled):
            self._steps += 1
            self._step = shorten(f"{event.name}: {event.summary}", STEP_CHARS)  # "…": see redaction
        elif isinstance(event, UsageUpdated):
            charge = self._meter.charge(event.usage)
            self._cost, self._unpriced = charge.cost_usd, charge.unpriced

    async def _tick(self) -> None:
        """The message after ``delay_s``, then its edits; edits name the message by its outbox
        row: nothing here waits for delivery."""
        await asyncio.sleep(self._delay_s)
        if not await self._holds():
            return
        self._shown = self.text()
        # not cancelled with the ticker: a turn that ends while its row is being written (a
        # commit on PostgreSQL awaits the server) still learns the row, and removes it
        self._queueing = asyncio.ensure_future(
            self._notifier.send(self._task, self._shown, kind=MessageKind.PROGRESS)
        )
        self._row_id = await asyncio.shield(self._queueing)
        await self._notifier.ack_status(dataclasses.replace(self._task, status=TaskStatus.RUNNING))
        self._last_edit = time.monotonic()
        while True:
            await asyncio.sleep(self._interval_s)
            text = self.text()
            if text != self._shown and time.monotonic() - self._last_edit >= self._interval_s:
                if not await self._holds():
                    return
                self._shown, self._last_edit = text, time.monotonic()
                await self._notifier.edit_row(self._task.chat_id, self._row_id, text)

    async def _holds(self) -> bool:
        return self._held is None or await self._held()

    async def __aexit__(self, *exc: object) -> None:
        """The message never outlives the turn: removed, or never sent if it still waits in a
        backed-up chat (its pending edits go with it)."""
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if not self._row_id and self._queueing is not None:
            await self._queued(self._queueing)
        if self._row_id and await self._holds():  # else the taker retired it
            await asyncio.shield(self._notifier.retire(self._task.chat_id, self._row_id))

    async def _queued(self, queueing: asyncio.Future[int]) -> None:
        """The row of a message the turn's end caught being queued (0 if queueing failed)."""
        try:
            async with asyncio.timeout(QUEUED_WAIT_S):
                self._row_id = await asyncio.shield(queueing)
        except TimeoutError:
            log.warning("task %s: its progress message was still being queued", self._task.id)
        except Exception:  # the ticker saw it fail already: nothing was queued
            log.debug("task %s: queueing its progress message failed", self._task.id)
