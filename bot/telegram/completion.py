"""A turn's completion card: one message that says what happened (denied tool calls, a spent
budget's Extend / Stop, a cancel) with the card's buttons, and at most one buzz for it. A long
answer comes in parts of which only the first notifies, or as its rendered summary and silent
files (``bot.telegram.summary``); a turn cancelled by ``/cancel`` turns that command's
"cancelling…" reply into its card."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from bot.models import CheckResult, MessageKind, Task, TaskStatus, Turn
from bot.store import Store
from bot.telegram.answer_page import page
from bot.telegram.callbacks import (
    CARD_ACTIONS,
    PR_ACTIONS,
    WORKTREE_ACTIONS,
    TaskAction,
    task_keyboard,
)
from bot.telegram.cards import card_header
from bot.telegram.lifecycle import TaskMessages
from bot.telegram.markup import Button, Keyboard, Markup
from bot.telegram.render import MAX_CHUNKS, TELEGRAM_LIMIT, markdown_chunks
from bot.telegram.summary import summary
from bot.telegram.terminal import hold_button, terminal_command
from bot.telegram.texts import Texts

SUMMARY_CHARS = 3000  # a long answer's summary on its card, at most (its HTML)


@dataclass(frozen=True, slots=True)
class CardAsk:
    """A question the card itself asks (a spent budget: Extend / Stop): its line under the
    card's text and its buttons, above the card's own."""

    question_id: int
    line: str
    keyboard: Keyboard


class Poster(Protocol):
    """How the card's messages are queued (the notifier: linked to the task, its policy)."""

    async def send(
        self,
        task: Task,
        text: str,
        kind: MessageKind,
        reply_to: int | None = None,
        markup: Markup | None = None,
        follow_on: bool = False,
        about: dict[str, Any] | None = None,
    ) -> int: ...

    async def send_file(
        self, task: Task, data: bytes, filename: str, caption: str, follow_on: bool = False
    ) -> int: ...


class Completion:
    def __init__(self, store: Store, texts: Texts, poster: Poster, lifecycle: TaskMessages) -> None:
        self._store = store
        self._texts = texts
        self._poster = poster
        self._lifecycle = lifecycle
        self.board_url: str | None = None  # https://: cards open the task's board page
        # the pull request buttons a worktree task's card offers (bot.prs: Push only off GitHub)
        self.pr_actions: Callable[[Task], Awaitable[Sequence[str]]] | None = None

    async def card(
        self,
        task: Task,
        turn: Turn,
        denials: Sequence[str] = (),
        changes: str = "",
        ask: CardAsk | None = None,
        worktree_work: bool = False,
    ) -> int:
        """Queue the card; returns the row of its message that carries the buttons (and
        ``ask``'s line: a card that asks has no answer under it). ``worktree_work``: the task's
        worktree holds work (Show diff, Merge and Discard are offered only then)."""
        check = await self._store.checks.for_turn(turn.id) if task.check else None
        children = await self._store.tasks.children(task.id) if task.subtasks else []
        host = turn.host if turn.host and await self._store.runners.hosts_known() > 1 else None
        header = card_header(self._texts, task, turn, check, children, changes, denials, host)
        header += await self._price_note(task, turn)
        if ask is not None:
            header += "\n\n" + ask.line
        prs = await self._pr_row(task) if worktree_work else []
        markup = self._keyboard(task, ask, worktree_work, prs)
        if check is not None and check.approved and not check.passed:
            await self._check_output(task, check)
        if turn.status is TaskStatus.CANCELLED:
            taken = await self._take_cancelling(task, header, markup)
            if taken is not None:
                return taken
        if turn.status not in (TaskStatus.DONE, TaskStatus.CHECK_FAILED) or ask is not None:
            return await self._poster.send(task, header, kind=MessageKind.RESULT, markup=markup)
        answer = (turn.result_text or "").strip() or self._texts.get(task.locale, "task.no_answer")
        chunks = markdown_chunks(answer)
        if len(chunks) > MAX_CHUNKS:
            return await self._send_document(task, header, answer, markup)
        row_id = 0
        for index, chunk in enumerate(chunks):
            last = index == len(chunks) - 1
            row_id = await self._poster.send(
                task,
                f"{header}\n\n{chunk}" if index == 0 else chunk,
                kind=MessageKind.RESULT,
                markup=markup if last else None,
                follow_on=index > 0,  # the first part buzzed for the answer
            )
        return row_id

    async def _price_note(self, task: Task, turn: Turn) -> str:
        """Said once to an owner per model: the first card of a model with no known price says
        how it is counted and how to price it (/spend says it every time)."""
        if not turn.unpriced or await self._store.spend.unpriced_before(
            task.owner_id, turn.model, turn.id
        ):
            return ""
        return "\n" + self._texts.get(
            task.locale, "task.unpriced_note", model=turn.model or "?", engine=task.engine
        )

    async def _pr_row(self, task: Task) -> Sequence[str]:
        return PR_ACTIONS if self.pr_actions is None else await self.pr_actions(task)

    def _keyboard(
        self, task: Task, ask: CardAsk | None, worktree_work: bool, prs: Sequence[str]
    ) -> Keyboard:
        card = task_keyboard(
            self._texts,
            task.locale,
            task.id,
            CARD_ACTIONS,
            WORKTREE_ACTIONS if worktree_work else [],
            prs,
        )
        if terminal_command(task) is not None:  # 🖥 To terminal: hand the session over
            card = Keyboard((*card.rows, (hold_button(self._texts, task.locale, task.id),)))
        if self.board_url is not None and task.chat_id > 0:  # a Mini App opens in private chats
            url = f"{self.board_url}/tasks/{task.id}"
            text = self._texts.get(task.locale, "board.open_task")
            card = Keyboard((*card.rows, (Button(text, "", web_app=url),)))
        return Keyboard(ask.keyboard.rows + card.rows) if ask is not None else card

    async def _take_cancelling(self, task: Task, header: str, markup: Keyboard) -> int | None:
        """A ``/cancel`` answered "cancelling…": that message becomes the card (no second
        message, no second buzz). An older one a second ``/cancel`` left says the end too."""
        rows = await self._store.outbox.sends_about(task.id, [MessageKind.CANCEL])
        if not rows:
            return None
        status = header.split("\n", 1)[0]
        for row in rows:
            newest = row is rows[-1]
            await self._lifecycle.rewrite(
                task.chat_id, row, header if newest else status, markup if newest else None
            )
            await self._store.outbox.relink(row.id, MessageKind.RESULT)
        return rows[-1].id

    async def answered(self, task: Task, row_id: int | None, asked: str, line: str) -> None:
        """The question the card of ``row_id`` asked (its line ``asked``) was answered: the
        line says ``line`` now, and the question's buttons go (the card's own stay)."""
        row = await self._store.outbox.get(row_id) if row_id is not None else None
        if row is None:
            return
        text = str(row.payload.get("text", ""))
        text = text.replace(asked, line) if asked and asked in text else f"{text}\n\n{line}"
        rows = (row.payload.get("markup") or {}).get("inline_keyboard") or []
        kept = [r for r in rows if all(_is_task_button(b) for b in r)]
        await self._lifecycle.rewrite(task.chat_id, row, text, Keyboard.from_json(kept))

    async def _check_output(self, task: Task, check: CheckResult) -> None:
        """The whole output of a failed check, as a file (the card after it buzzes)."""
        await self._poster.send_file(
            task,
            check.output.encode(),
            f"{task.id}-{task.slug}-check-round{check.round}.txt",
            self._texts.get(task.locale, "check.output_caption", label=task.label),
            follow_on=True,
        )

    async def _send_document(self, task: Task, header: str, answer: str, markup: Keyboard) -> int:
        """The answer's summary, rendered, with the card's buttons (it buzzes), then the whole
        answer as files: its Markdown and a page a phone's browser shows (both silent)."""
        note = "<i>" + self._texts.get(task.locale, "task.document_summary", chars=len(answer))
        note += "</i>"
        room = TELEGRAM_LIMIT - len(header) - len(note) - 8  # the blank lines between
        shown = summary(answer, min(SUMMARY_CHARS, room))
        row_id = await self._poster.send(
            task, f"{header}\n\n{shown}\n\n{note}", kind=MessageKind.RESULT, markup=markup
        )
        caption = self._texts.get(task.locale, "task.document_caption", label=task.label)
        name = f"{task.id}-{task.slug}"
        await self._poster.send_file(task, answer.encode(), f"{name}.md", caption, follow_on=True)
        # a 17k answer takes ~70 ms to render (100k: ~400): on a thread, not the event loop
        readable = (await asyncio.to_thread(page, answer, task.label)).encode()
        await self._poster.send_file(task, readable, f"{name}.html", caption, follow_on=True)
        return row_id


def _is_task_button(button: dict[str, Any]) -> bool:
    """One of the card's own buttons (a task action), not a question's."""
    try:
        TaskAction.unpack(str(button.get("callback_data", "")))
    except (TypeError, ValueError):
        return False
    return True
