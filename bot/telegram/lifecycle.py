"""Task messages that stay true after they were sent: the acknowledgement's status line and
Cancel button, and the task buttons on its cards and on restart notices, edited as the task
moves (no I/O to Telegram here: edits go through the outbox)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from bot.models import MessageKind, Task, TaskStatus, WaitState, WorktreeState, waiting_for
from bot.store import Store
from bot.store.outbox import OutboxRow
from bot.telegram.callbacks import (
    CARD_ACTIONS,
    PR_ACTIONS,
    RUN_ON,
    WORKTREE_ACTIONS,
    TaskAction,
    TaskButton,
    run_on_engine,
    task_keyboard,
)
from bot.telegram.markup import Keyboard, markup_json
from bot.telegram.outbox import Outbox
from bot.telegram.render import STATUS_ICONS, WAIT_ICON
from bot.telegram.texts import Texts

IDLE_ONLY = frozenset({TaskButton.RETRY, TaskButton.ARCHIVE, TaskButton.TO_TERMINAL})
ALWAYS = frozenset(CARD_ACTIONS) - IDLE_ONLY  # follow up, transcript
WORKTREE = frozenset([*WORKTREE_ACTIONS, *PR_ACTIONS]) | {TaskButton.DISCARD_YES}
# messages whose buttons follow their own moment, not the task's card buttons: the
# acknowledgement (``ack_status``), a follow-up's and a usage-limit notice (``TurnNotes``)
OWN_BUTTONS = frozenset({MessageKind.ACK, MessageKind.FOLLOWUP, MessageKind.LIMIT})


def allowed_actions(task: Task, worktree_active: bool) -> frozenset[str]:
    """The task buttons that still do something for ``task`` as it is now."""
    allowed: set[str] = set()
    if task.status is not TaskStatus.ARCHIVED:
        allowed |= ALWAYS | ({TaskButton.CANCEL} if task.status.active else IDLE_ONLY)
    if task.status is TaskStatus.INTERRUPTED:
        allowed |= {TaskButton.RESUME, TaskButton.FAIL}
    if task.status is TaskStatus.WAITING_FOR_LIMIT:
        allowed |= {TaskButton.WAIT, RUN_ON}
    if task.status is TaskStatus.QUEUED and (task.host or task.session_host):
        allowed |= {TaskButton.ELSEWHERE, TaskButton.FRESH}
    if worktree_active:
        allowed |= WORKTREE
    return frozenset(allowed)


def status_shown(texts: Texts, locale: str, task: Task, wait: WaitState | None) -> tuple[str, str]:
    """The icon and words of a task's state: what it waits for (``wait``), else its status."""
    if wait is not None:
        return WAIT_ICON, texts.wait(locale, wait)
    return STATUS_ICONS[task.status], texts.status(locale, task.status)


def first_status(texts: Texts, task: Task) -> tuple[str, str]:
    """``status_shown`` of a task just created (no question, no terminal yet)."""
    return status_shown(texts, task.locale, task, waiting_for(task.status, None, False))


def keeps(button: dict[str, object], allowed: Mapping[int, frozenset[str]]) -> bool:
    """A button of another task, or not a task button, stays; a button of a task in
    ``allowed`` must be one of its allowed actions."""
    try:
        action = TaskAction.unpack(str(button.get("callback_data", "")))
    except (TypeError, ValueError):
        return True
    name = RUN_ON if run_on_engine(action.action) is not None else action.action
    return action.task_id not in allowed or name in allowed[action.task_id]


def kept_buttons(keyboard: list[list[Any]], allowed: Mapping[int, frozenset[str]]) -> list[Any]:
    kept = [[b for b in line if keeps(b, allowed)] for line in keyboard]
    return [line for line in kept if line]


class TaskMessages:
    def __init__(self, store: Store, texts: Texts, outbox: Outbox) -> None:
        self._store = store
        self._texts = texts
        self._outbox = outbox

    async def ack_status(self, task: Task) -> None:
        """Edit the task's acknowledgement to tell what it waits for or its status now (its
        first line), keeping the rest (title, origin, mode); Cancel only while something can be
        cancelled. Nothing when the acknowledgement already says it (or was never sent)."""
        found = await self._store.outbox.first_send(task.id, "ack")
        if found is None:
            return
        row_id, chat_id, text = found
        head, _, rest = text.partition("\n")
        now = self.head(task, (await self._store.waits.of([task])).get(task.id))
        if now == head:
            return
        pinned = task.host is not None and task.status is TaskStatus.QUEUED
        actions = [TaskButton.ELSEWHERE, TaskButton.CANCEL] if pinned else [TaskButton.CANCEL]
        markup = (
            task_keyboard(self._texts, task.locale, task.id, actions)
            if task.status.active
            else None
        )
        await self._outbox.edit(chat_id, None, f"{now}\n{rest}", markup, row_id=row_id)

    def head(self, task: Task, wait: WaitState | None) -> str:
        """The acknowledgement's first line: icon, label, and what it waits for or its status."""
        icon, status = status_shown(self._texts, task.locale, task, wait)
        return self._texts.get(
            task.locale, "task.ack", icon=icon, label=task.label, status=status, title=""
        ).split("\n")[0]

    async def buttons_follow(self, task: Task, note: str | None = None) -> bool:
        """Every message that carries this task's buttons (its cards, a restart's notice)
        keeps only those that still apply to the task as it is now; ``note`` (HTML) is added
        to its newest card, saying what happened (merged, archived…). The acknowledgement is
        ``ack_status``'s. True when ``note`` went on a card."""
        allowed = {task.id: await self._allowed(task)}
        rows = [
            r
            for r in await self._store.outbox.with_task_buttons(task.chat_id, task.id)
            if r.link_kind not in OWN_BUTTONS
        ]
        newest_card = max((r.id for r in rows if r.link_kind == MessageKind.RESULT), default=None)
        for row in rows:
            keyboard = (row.payload.get("markup") or {}).get("inline_keyboard") or []
            kept = kept_buttons(keyboard, allowed)
            text = row.payload.get("text", "")
            if note and row.id == newest_card:
                text = f"{text}\n{note}"
            elif kept == keyboard:
                continue
            await self._show(task.chat_id, row, text, kept)
        return note is not None and newest_card is not None

    async def card_line(self, task: Task, prefix: str, line: str) -> bool:
        """The task's newest card says ``line`` (HTML) instead of its line starting with
        ``prefix``, or under its text (an edit, no new message); False when it has no card."""
        row = await self._store.outbox.newest_send(task.id, MessageKind.RESULT)
        if row is None:
            return False
        text = str(row.payload.get("text", ""))
        kept = [kept for kept in text.split("\n") if not kept.startswith(prefix)]
        keyboard = (row.payload.get("markup") or {}).get("inline_keyboard") or []
        await self._show(task.chat_id, row, "\n".join([*kept, line]), keyboard)
        return True

    async def buttons_follow_all(self, tasks: Sequence[Task], note_key: str) -> None:
        """``buttons_follow`` for many tasks of one chat in one batch (``/archive all``): one
        scan of the chat's messages, each edited at most once, the newest first; each task's
        newest card says ``note_key``."""
        if not tasks:
            return
        chat_id, by_id = tasks[0].chat_id, {t.id: t for t in tasks}
        allowed = {t.id: await self._allowed(t) for t in tasks}
        rows = [
            r
            for r in await self._store.outbox.with_buttons_of(chat_id, list(by_id))
            if r.link_kind not in OWN_BUTTONS
        ]
        newest: dict[int, int] = {}  # task id -> the row of its newest card
        for row in rows:
            if row.link_kind == MessageKind.RESULT and row.task_id in by_id:
                newest[row.task_id] = row.id
        for row in reversed(rows):
            keyboard = (row.payload.get("markup") or {}).get("inline_keyboard") or []
            kept, text = kept_buttons(keyboard, allowed), row.payload.get("text", "")
            if row.task_id is not None and newest.get(row.task_id) == row.id:
                text = f"{text}\n{self._texts.get(by_id[row.task_id].locale, note_key)}"
            elif kept == keyboard:
                continue
            await self._show(chat_id, row, text, kept)

    async def _allowed(self, task: Task) -> frozenset[str]:
        worktree = await self._store.worktrees.get(task.id)
        return allowed_actions(
            task, worktree is not None and worktree.state == WorktreeState.ACTIVE
        )

    async def replace(
        self, task: Task, link_kind: str, text: str | None, markup: Keyboard | None
    ) -> bool:
        """The task's newest message of ``link_kind`` says ``text`` (None: what it said) with
        ``markup`` now (False: it has none)."""
        row = await self._store.outbox.newest_send(task.id, link_kind)
        if row is None:
            return False
        kept = markup.as_json()["inline_keyboard"] if markup else []
        shown = row.payload.get("text", "") if text is None else text
        await self._show(task.chat_id, row, shown, kept)
        return True

    async def rewrite(
        self,
        chat_id: int,
        row: OutboxRow,
        text: str,
        markup: Keyboard | None,
        about: dict[str, Any] | None = None,
    ) -> None:
        """The message of ``row`` says ``text`` with ``markup`` now (None: no buttons);
        ``about`` replaces what its row keeps of what it tells (never sent)."""
        if about is not None:
            row = dataclasses.replace(row, payload={**row.payload, "about": about})
        kept = markup.as_json()["inline_keyboard"] if markup else []
        await self._show(chat_id, row, text, kept)

    async def drop_buttons(self, task: Task, link_kind: str) -> None:
        """The task's messages of ``link_kind`` lose their buttons (a notice whose moment
        passed: a usage limit's, once the task goes on)."""
        for row in await self._store.outbox.with_task_buttons(task.chat_id, task.id):
            if row.link_kind == link_kind:
                await self._show(task.chat_id, row, row.payload.get("text", ""), [])

    async def _show(self, chat_id: int, row: OutboxRow, text: str, kept: list[list[Any]]) -> None:
        """A message's new text and buttons: in its row (a message not sent yet goes out as it
        is now), and as an edit of the delivered one (only the buttons when the text stayed)."""
        markup = Keyboard.from_json(kept)
        payload = {**row.payload, "markup": markup_json(markup), "text": text}
        await self._store.outbox.replace_payload(row.id, payload)
        if row.status != "sent" or (
            text == row.payload.get("text", "") and payload["markup"] == row.payload.get("markup")
        ):
            return  # not sent yet (it goes out as it is now), or it says this already
        if text != row.payload.get("text", ""):
            await self._outbox.edit(chat_id, None, text, markup, row_id=row.id)
        else:
            await self._outbox.edit_markup(chat_id, row.id, markup)
