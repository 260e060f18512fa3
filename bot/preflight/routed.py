"""The acknowledgement of a task the preflight routed to another engine or preset: "Run on
<default> instead" (``RunDefault``) next to its Cancel while it waits to start, and the line
saying it moved back when the owner took that offer. Both edit the task's first "ack" send in
the outbox; a task with none is left alone."""

from __future__ import annotations

import html
import logging
from typing import Annotated

from pydantic import Field

from bot.models import Task
from bot.preflight.message import plain
from bot.store import Store
from bot.telegram.callbacks import Id, TaskAction, TaskButton
from bot.telegram.markup import CallbackData, Keyboard
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)


class RunDefault(CallbackData, prefix="pfd"):
    """ "Run on <default> instead" under a routed task's acknowledgement: the engine and preset
    (\"\": the engine's own model) it was planned on before the preflight routed it."""

    task_id: Id
    engine: Annotated[str, Field(max_length=16)]
    preset: Annotated[str, Field(max_length=32)]


class RoutedAck:
    """Edits a routed task's acknowledgement through the outbox."""

    def __init__(self, store: Store, outbox: Outbox, texts: Texts) -> None:
        self._store = store
        self._outbox = outbox
        self._texts = texts

    async def offer_default(self, task: Task, engine: str, preset: str | None) -> None:
        """Add "Run on <default> instead" to a routed task's acknowledgement (next to its
        Cancel); it goes when the task starts (the acknowledgement's buttons follow it)."""
        found = await self._store.outbox.first_send(task.id, "ack")
        if found is None or len(engine) > 16 or len(preset or "") > 32:
            return
        row_id, chat_id, _ = found
        back = RunDefault(task_id=task.id, engine=engine, preset=preset or "")
        caption = plain(self._texts, task.locale, "preflight.run_default", name=preset or engine)
        try:  # a preset name Telegram's 64 bytes or the data's separator cannot carry
            button = back.button(caption)
        except ValueError:
            log.info("task %s: no Run on %s button (its name does not fit)", task.id, preset)
            return
        cancel = TaskAction.buttons(self._texts, task.locale, task.id, [TaskButton.CANCEL])
        keyboard = Keyboard.of([cancel, [button]])
        await self._outbox.edit_markup(chat_id, row_id, keyboard)

    async def moved_back(self, task: Task, routed_line: str, line: str) -> None:
        """The acknowledgement of a task moved back to its default says so instead of where
        the preflight had routed it, and keeps Cancel only."""
        found = await self._store.outbox.first_send(task.id, "ack")
        if found is None:
            return
        row_id, chat_id, text = found
        routed, now = html.escape(routed_line, quote=False), html.escape(line, quote=False)
        text = text.replace(routed, now) if routed in text else f"{text}\n{now}"
        cancel = TaskAction.buttons(self._texts, task.locale, task.id, [TaskButton.CANCEL])
        await self._outbox.edit(chat_id, None, text, Keyboard.of([cancel]), row_id=row_id)
