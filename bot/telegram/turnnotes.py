"""Messages about one turn of a task that must stay true as that turn moves, so that none still
says "queued" or "waits" once its task has ended:

- a follow-up's acknowledgement: queued, with Cancel; then running; then how the turn ended.
  Cancel goes once the turn has started (the task's first acknowledgement keeps its own).
- a usage-limit notice: waiting, with its buttons; then where the task went (on with another
  engine, or on at the reset) and how that turn ended; a task cancelled while it waited says so.

A "cancelling…" answer to ``/cancel`` becomes the turn's card (``bot.telegram.completion``);
one left by a process that died first says where the task is.

Each follow-up's and limit's message carries its turn in its outbox row (``about``: ``turn``,
and the limited ``engine`` or the MCP ``client``); ``follow`` brings them up to date, edited in
place (no buzz), and marks one ``final`` once its turn has ended: it is never edited again."""

from __future__ import annotations

import html
from typing import Any

from bot.models import FollowUpDoor, MessageKind, Task, TaskStatus, Turn
from bot.store import Store
from bot.store.outbox import OutboxRow
from bot.telegram.callbacks import TaskButton, task_keyboard
from bot.telegram.lifecycle import TaskMessages
from bot.telegram.markup import Keyboard
from bot.telegram.render import STATUS_ICONS
from bot.telegram.texts import Texts

# what another quiet line about a turn says once that turn runs (``Notifier.turn_note``)
STATE_KEYS = frozenset({"task.retry_state", "task.resume_state"})
VIA_KEYS: dict[str, str] = {
    FollowUpDoor.BOARD: "followup.via_board",
    FollowUpDoor.MCP: "followup.via_mcp",
}


def followup_via(texts: Texts, locale: str, about: dict[str, Any]) -> str:
    """Where a follow-up came from, as its acknowledgement says it (``about``: its row's):
    nothing for a reply or a voice note (the acknowledgement answers it), else the board or
    the MCP client (an older row names only its ``client``)."""
    client = about.get("client")
    door = FollowUpDoor.MCP if isinstance(client, str) else about.get("door")
    key = VIA_KEYS.get(door) if isinstance(door, str) else None
    return texts.get(locale, key, client=str(client or "")) if key else ""


def turn_state(task: Task, turn: Turn) -> TaskStatus:
    """Where a turn is: a queued turn its engine's usage limit sent back waits for it."""
    if turn.status is TaskStatus.QUEUED and task.status is TaskStatus.WAITING_FOR_LIMIT:
        return TaskStatus.WAITING_FOR_LIMIT
    return turn.status


class TurnNotes:
    def __init__(self, store: Store, texts: Texts, lifecycle: TaskMessages) -> None:
        self._store = store
        self._texts = texts
        self._lifecycle = lifecycle

    async def follow(self, task: Task) -> None:
        """Every follow-up acknowledgement and limit notice of ``task`` says what its turn
        did; one whose turn ended is edited a last time."""
        async with self._store.atomic():  # read and rewritten with no delivery between
            kinds = [MessageKind.FOLLOWUP, MessageKind.LIMIT, MessageKind.CANCEL]
            for row in await self._store.outbox.sends_about(task.id, kinds):
                if row.link_kind == MessageKind.CANCEL:
                    await self._cancelling(task, row)
                    continue
                about: dict[str, Any] = row.payload.get("about") or {}
                if about.get("final") or not isinstance(about.get("turn"), int):
                    continue
                turn = await self._store.tasks.get_turn(about["turn"])
                if turn is None:
                    continue
                if row.link_kind == MessageKind.FOLLOWUP:
                    text = self._followup(task, turn, about)
                else:
                    text = self._limit(task, turn, about)
                if text is None:  # still queued, or still waiting: as it was sent
                    continue
                state = turn_state(task, turn)
                markup = (  # queued again (a limit it waited for was left): Cancel again
                    task_keyboard(self._texts, task.locale, task.id, [TaskButton.CANCEL])
                    if state is TaskStatus.QUEUED
                    else None
                )
                final = not turn.status.active
                await self._lifecycle.rewrite(
                    task.chat_id, row, text, markup, about={**about, "moved": True, "final": final}
                )

    async def steer_note(
        self,
        task: Task,
        turn_id: int,
        key: str,
        params: dict[str, object],
        markup: Keyboard | None,
        final: bool,
    ) -> None:
        """A follow-up's acknowledgement says what its steer came to (``key``, with where the
        follow-up came from; ``final``: its turn is gone, taken into the running one: never
        edited again)."""
        async with self._store.atomic():
            for row in await self._store.outbox.sends_about(task.id, [MessageKind.FOLLOWUP]):
                about: dict[str, Any] = row.payload.get("about") or {}
                if about.get("turn") != turn_id or about.get("final") or about.get("moved"):
                    continue
                via = followup_via(self._texts, task.locale, about)
                label = html.escape(task.label)
                text = self._texts.raw(task.locale, key, label=label, via=via, **params)
                about = {**about, "final": final}
                await self._lifecycle.rewrite(task.chat_id, row, text, markup, about=about)

    async def _cancelling(self, task: Task, row: OutboxRow) -> None:
        """A "cancelling…" whose turn ended with no card to take it over (the process died
        first: the task is interrupted) says where the task is instead."""
        if task.status.active:
            return
        head = self._lifecycle.head(task, (await self._store.waits.of([task])).get(task.id))
        await self._lifecycle.rewrite(task.chat_id, row, head, None)
        await self._store.outbox.relink(row.id, MessageKind.STATUS)

    def _end(self, task: Task, turn: Turn) -> str:
        state = turn_state(task, turn)
        return f"{STATUS_ICONS[state]} {self._texts.status(task.locale, state)}"

    def _followup(self, task: Task, turn: Turn, about: dict[str, Any]) -> str | None:
        if turn_state(task, turn) is TaskStatus.QUEUED and not about.get("moved"):
            return None
        key = "task.followup_state"
        if about.get("state") in STATE_KEYS:
            key = str(about["state"])
        via = followup_via(self._texts, task.locale, about)  # HTML already
        end = html.escape(self._end(task, turn), quote=False)
        return self._texts.raw(task.locale, key, label=html.escape(task.label), via=via, end=end)

    def _limit(self, task: Task, turn: Turn, about: dict[str, Any]) -> str | None:
        limited = str(about.get("engine") or task.engine)
        if task.engine == limited and turn_state(task, turn) is TaskStatus.WAITING_FOR_LIMIT:
            return None
        if task.engine != limited:
            key = "task.limit_notice_moved"
        elif turn.started_at is not None or turn.status.active:
            key = "task.limit_notice_reset"
        else:  # it never went on: cancelled while it waited
            key = "task.limit_notice_over"
        return self._texts.get(
            task.locale,
            key,
            label=task.label,
            before=limited.capitalize(),
            engine=task.engine.capitalize(),
            end=self._end(task, turn),
        )
