"""Everything the bot tells a user about a task, sent in the task owner's locale and linked to the
task, so that a reply to any of these messages continues it."""

from __future__ import annotations

import html
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.models import (
    ApprovalMode,
    CheckResult,
    Engine,
    FollowUpDoor,
    MessageKind,
    ProcessRole,
    Task,
    Turn,
)
from bot.store import PendingQuestion, Runner, Store
from bot.telegram.callbacks import TaskAction, TaskButton, run_on, steer_buttons, task_keyboard
from bot.telegram.completion import CardAsk, Completion
from bot.telegram.lifecycle import TaskMessages, first_status
from bot.telegram.markup import Keyboard, Markup
from bot.telegram.outbox import Outbox
from bot.telegram.policies import ChatPolicies
from bot.telegram.render import shorten
from bot.telegram.texts import Texts
from bot.telegram.turnnotes import TurnNotes, followup_via
from executors import registry

log = logging.getLogger(__name__)
TASK_BUZZES = 2  # the two-buzz rule: a task's messages buzz at most this many times
# what notifies under the default policy: what needs the person, and the final card


@dataclass(frozen=True, slots=True)
class Sent:
    message_id: int


class Notifier:
    def __init__(self, store: Store, texts: Texts, outbox: Outbox) -> None:
        self._store = store
        self._texts = texts
        self._outbox = outbox
        self._lifecycle = TaskMessages(store, texts, outbox)
        self._notes = TurnNotes(store, texts, self._lifecycle)
        self._completion = Completion(store, texts, self, self._lifecycle)
        self.policies = ChatPolicies(store)

    def offer_prs(self, actions: Callable[[Task], Awaitable[Sequence[str]]]) -> None:
        """A worktree task's card asks ``actions`` which pull request buttons it offers."""
        self._completion.pr_actions = actions

    def open_board_at(self, url: str) -> None:
        """Completion cards get an "Open" button to the task's page at ``url`` (an https://
        board: a Telegram Mini App)."""
        self._completion.board_url = url.rstrip("/")

    def text(self, locale: str, key: str, **params: object) -> str:
        return self._texts.get(locale, key, **params)

    @property
    def texts(self) -> Texts:
        return self._texts

    async def acknowledge(
        self,
        task: Task,
        reply_to: int | None = None,
        origin: str | None = None,
        note: str | None = None,
        elsewhere: bool = False,
    ) -> None:
        """``origin`` (already HTML): where a task that no message started came from; ``note``
        (plain): one line more, such as why the sandbox is not used; ``elsewhere``: its host is
        offline, Run elsewhere is offered."""
        icon, status = first_status(self._texts, task)
        text = self._texts.get(
            task.locale,
            "task.ack",
            icon=icon,
            label=task.label,
            status=status,
            title=shorten(task.title, 300, one_line=True),
        )
        if origin:
            text += "\n" + origin
        text += self._ack_mode(task)
        if note:
            text += "\n" + html.escape(note, quote=False)
        await self.send(
            task,
            text,
            kind=MessageKind.ACK,
            reply_to=reply_to,
            markup=task_keyboard(
                self._texts,
                task.locale,
                task.id,
                [TaskButton.ELSEWHERE, TaskButton.CANCEL] if elsewhere else [TaskButton.CANCEL],
            ),
        )

    async def ack_status(self, task: Task) -> None:
        """The task's acknowledgement, and every follow-up's and usage-limit notice, say where
        the task and their turns are now."""
        await self._lifecycle.ack_status(task)
        await self._notes.follow(task)

    async def turn_started(self, task: Task) -> None:
        """A turn starts: its follow-up acknowledgement loses Cancel and says it runs, and a
        usage-limit notice it waited on says where it went."""
        await self._notes.follow(task)

    async def buttons_follow(self, task: Task, note: str | None = None) -> bool:
        return await self._lifecycle.buttons_follow(task, note)

    async def card_line(self, task: Task, prefix: str, line: str) -> bool:
        return await self._lifecycle.card_line(task, prefix, line)

    def _ack_mode(self, task: Task) -> str:
        """How the task may act, when it is not the usual asking: sandboxed, and its check."""
        parts = []
        if note := registry.ack_note(task.engine):
            parts.append(self._texts.get(task.locale, note))
        sandboxed = registry.isolation(task.engine, ApprovalMode.SANDBOX) is not None
        if task.approval_mode is ApprovalMode.SANDBOX and sandboxed:  # the engine has one
            parts.append(self._texts.get(task.locale, "task.ack_sandbox"))
        if task.subtasks:
            parts.append(self._texts.get(task.locale, "task.ack_subtasks"))
        if task.check:  # whole: padding must not hide what runs
            key = "task.ack_check_repository" if task.check_repository else "task.ack_check"
            parts.append(self._texts.get(task.locale, key, command=task.check))
        return "\n" + " · ".join(parts) if parts else ""

    async def limit_waits(
        self,
        task: Task,
        turn_id: int,
        key: str,
        resets: str,
        others: Sequence[Engine] = (),
        again: bool = False,
    ) -> None:
        """The task waits for its engine's usage limit (``task.limit_parked[_no_time]``), with
        buttons to go on with ``others`` now, to wait, or to cancel. ``again``: it waited
        before; its notice says the new time (no new message, no buzz). Once the turn goes
        on, the notice says where, and then how it ended (``TurnNotes``)."""
        text = self._texts.get(
            task.locale,
            key,
            label=html.escape(task.label),
            engine=task.engine.capitalize(),
            resets=resets,
        )
        markup = task_keyboard(
            self._texts,
            task.locale,
            task.id,
            [run_on(e) for e in others],
            [TaskButton.WAIT, TaskButton.CANCEL],
        )
        if again and await self._lifecycle.replace(task, MessageKind.LIMIT, text, markup):
            return
        about = {"turn": turn_id, "engine": str(task.engine)}
        await self.send(task, text, kind=MessageKind.LIMIT, markup=markup, about=about)

    async def limit_wait_chosen(self, task: Task) -> None:
        """The owner chose to wait: the notice keeps its Cancel only."""
        markup = task_keyboard(self._texts, task.locale, task.id, [TaskButton.CANCEL])
        await self._lifecycle.replace(task, MessageKind.LIMIT, None, markup)

    async def limit_over(self, task: Task, engine: str, say: bool = True) -> None:
        """A task that waited for its engine's usage limit starts again: when ``say``, one
        line says so (its notice follows the turn: ``turn_started``)."""
        if not say:
            return
        text = self._texts.get(
            task.locale, "task.limit_resumed", label=html.escape(task.label), engine=engine
        )
        await self.send(
            task, text, kind=MessageKind.STATUS
        )  # no buzz: nothing to do (the card buzzes)

    async def engine_switched(self, task: Task, before: Engine) -> None:
        """The owner carried the task over to another engine: one quiet line (they just
        pressed the button); the waiting notice follows with ``ack_status``."""
        text = self._texts.get(
            task.locale,
            "task.engine_switched",
            label=task.label,
            engine=task.engine.capitalize(),
            before=before.capitalize(),
        )
        await self.send(task, text, kind=MessageKind.STATUS)

    async def followup_queued(
        self,
        task: Task,
        turn_id: int,
        *,
        behind: bool,
        offer: bool = False,
        reply_to: int | None = None,
        door: FollowUpDoor = FollowUpDoor.CHAT,
        client: str = "",
    ) -> None:
        """A follow-up's acknowledgement (from ``door``), with Cancel while its turn waits;
        edited as that turn moves (``TurnNotes``), so it ends as part of the task's history.
        ``behind``: a turn runs, it comes after it; ``offer``: or into it (Steer now /
        Queue)."""
        loc = task.locale
        tail = "steer.offer" if offer else "task.followup_behind" if behind else None
        about: dict[str, Any] = {"turn": turn_id, "door": door}
        if client:
            about["client"] = client
        text = self._texts.raw(
            loc,
            "task.followup_ack",
            label=html.escape(task.label),
            via=followup_via(self._texts, loc, about),
            behind=self._texts.get(loc, tail) if tail else "",
        )
        await self.send(
            task,
            text,
            kind=MessageKind.FOLLOWUP,
            reply_to=reply_to,
            markup=self._followup_keyboard(task, turn_id if offer else None),
            about=about,
        )

    async def steer_note(
        self, task: Task, turn_id: int, key: str, final: bool = True, **params: object
    ) -> None:
        """A follow-up's acknowledgement (of turn ``turn_id``) says ``key`` of its steer now;
        its Steer / Queue buttons are gone, Cancel stays while the turn is queued."""
        keep = None if final else self._followup_keyboard(task, None)
        await self._notes.steer_note(task, turn_id, key, params, keep, final)

    def _followup_keyboard(self, task: Task, steer_turn: int | None) -> Keyboard:
        """Cancel; with ``steer_turn``: Steer now / Queue for that queued turn above it."""
        cancel = TaskAction.buttons(self._texts, task.locale, task.id, [TaskButton.CANCEL])
        if steer_turn is None:
            return Keyboard.of([cancel])
        return Keyboard.of([steer_buttons(self._texts, task.locale, steer_turn), cancel])

    async def turn_note(self, task: Task, turn_id: int, key: str, state_key: str) -> None:
        """One quiet line about a turn the owner asked for (``task.retrying``), which says
        how that turn went once it runs (``state_key``, a key of ``TurnNotes``)."""
        text = self._texts.get(task.locale, key, label=task.label)
        about = {"turn": turn_id, "state": state_key}
        await self.send(task, text, kind=MessageKind.FOLLOWUP, about=about)

    async def cancelling(self, task: Task, reply_to: int | None) -> int:
        """The answer to ``/cancel`` of a running turn: "cancelling…", which becomes the
        turn's card when it stops (one message, one buzz)."""
        text = self._texts.get(task.locale, "task.cancel_requested", label=task.label)
        return await self.send(task, text, kind=MessageKind.CANCEL, reply_to=reply_to)

    async def cancelled_queued(self, task: Task, dropped: int, reply_to: int | None) -> None:
        """The answer to ``/cancel`` of a task that had not started (or waited): it is over."""
        text = self._texts.get(
            task.locale, "task.cancelled_queued", label=task.label, count=dropped
        )
        await self.send(task, text, kind=MessageKind.RESULT, reply_to=reply_to)

    async def turn_finished(
        self,
        task: Task,
        turn: Turn,
        denials: Sequence[str] = (),
        changes: str = "",
        ask: CardAsk | None = None,
        worktree_work: bool = False,
    ) -> int:
        """The completion card (``bot.telegram.completion``); returns the row of its message
        with the buttons (Merge and Discard with ``worktree_work``: its worktree holds work)."""
        return await self._completion.card(task, turn, denials, changes, ask, worktree_work)

    async def budget_answered(self, task: Task, question: PendingQuestion, line: str) -> None:
        """The card's budget question was answered: its line says ``line`` now (a question
        asked in a message of its own, before cards asked, becomes ``line``)."""
        if question.row_id is None and question.message_id is not None:
            await self.edit(task.chat_id, question.message_id, line)
            return
        asked = str(question.payload.get("line", ""))
        await self._completion.answered(task, question.row_id, asked, line)

    async def check_retrying(self, task: Task, check: CheckResult, rounds: int) -> None:
        """A failed check with rounds left: one line, the agent is on it."""
        text = self._texts.raw(
            task.locale,
            "check.retrying",
            label=html.escape(task.label),
            command=html.escape(shorten(check.command, 80, one_line=True)),
            round=check.round,
            rounds=rounds,
        )
        await self.send(
            task, f"{text}\n<pre>{html.escape(check.tail(600))}</pre>", kind=MessageKind.STATUS
        )

    async def send_file(
        self, task: Task, data: bytes, filename: str, caption: str, follow_on: bool = False
    ) -> int:
        """A document about ``task``, through the outbox (linked to the task once delivered).
        ``follow_on``: part of a message already sent, which buzzed for it."""
        return await self._outbox.send_document(
            task.chat_id,
            data,
            filename,
            caption,
            task_id=task.id,
            link_kind=MessageKind.DOCUMENT,
            silent=await self._silent(task.chat_id, MessageKind.DOCUMENT, follow_on),
        )

    async def _silent(self, chat_id: int, kind: MessageKind, follow_on: bool = False) -> bool:
        return await self.policies.silent(chat_id, kind, follow_on)

    async def interrupted(
        self, chat_id: int, tasks: Sequence[Task], runner: Runner | None = None
    ) -> None:
        """One message per owner listing what a restart (or a lost scale-out ``runner``)
        interrupted, with buttons per task."""
        loc = tasks[0].locale
        lines = [self._interrupted_header(loc, runner)]
        lines += [
            self._texts.get(
                loc,
                "task.interrupted_item",
                label=t.label,
                title=shorten(t.title, 80, one_line=True),
            )
            for t in tasks
        ]
        lines.append(self._texts.get(loc, "task.interrupted_footer"))
        rows = [
            TaskAction.buttons(
                self._texts, loc, t.id, [TaskButton.RESUME, TaskButton.FAIL], t.label
            )
            for t in tasks[:20]
        ]
        await self._outbox.send(
            chat_id,
            "\n".join(lines),
            task_id=tasks[0].id,
            link_kind=MessageKind.INTERRUPTED,
            silent=await self._silent(chat_id, MessageKind.INTERRUPTED),
            markup=Keyboard.of(rows),
        )

    def _interrupted_header(self, loc: str, runner: Runner | None) -> str:
        if runner is None or runner.role != ProcessRole.WORKER:
            return self._texts.get(loc, "task.interrupted_header")
        key = (
            "task.interrupted_worker_stopped"
            if runner.stopped_at
            else "task.interrupted_worker_lost"
        )
        return self._texts.get(loc, key, name=runner.name, host=runner.host)

    async def send(
        self,
        task: Task,
        text: str,
        kind: MessageKind,
        reply_to: int | None = None,
        markup: Markup | None = None,
        follow_on: bool = False,
        about: dict[str, Any] | None = None,
    ) -> int:
        """Queue a message about ``task`` (linked to it once delivered); returns its outbox row
        at once. ``follow_on``: a later part of a message that buzzed already (silent);
        ``about``: what later edits of it need to know (its turn…)."""
        return await self._outbox.send(
            task.chat_id,
            text,
            markup=markup,
            reply_to=reply_to,
            task_id=task.id,
            link_kind=kind,
            silent=await self._silent(task.chat_id, kind, follow_on),
            about=about,
        )

    async def agent_note(self, task: Task, text: str, urgent: bool) -> bool:
        """The agent's own note (its ``notify``), in the task's thread: a reply to its
        acknowledgement (in its topic, if it has one), escaped. Silent unless ``urgent``, and
        then only while the task and its outcome card together stay within ``TASK_BUZZES``
        (the two-buzz rule: one is kept for the card) and the chat is not /notify quiet.
        Returns whether it buzzes."""
        ack = await self._store.outbox.first_send(task.id, MessageKind.ACK)
        reply_to = await self._outbox.delivered(ack[0], timeout_s=5.0) if ack else None
        loud = urgent and not await self._silent(task.chat_id, MessageKind.QUESTION)
        if loud:
            sent = await self._store.outbox.sends_about(task.id, list(MessageKind))
            buzzed = sum(not row.payload.get("silent") for row in sent)
            loud = buzzed + 1 < TASK_BUZZES  # the outcome's card buzzes too
        key = "task.agent_note_urgent" if urgent else "task.agent_note"
        await self._outbox.send(
            task.chat_id,
            self._texts.get(task.locale, key, label=task.label, text=text),
            reply_to=reply_to,
            task_id=task.id,
            link_kind=MessageKind.STATUS,
            silent=not loud,
        )
        return loud

    async def send_and_wait(
        self, task: Task, text: str, kind: MessageKind, markup: Keyboard | None = None
    ) -> Sent | None:
        """Like ``send``, for the caller that needs the message id: waits for delivery, after
        the outbox's pacing (None when it failed or took too long)."""
        row_id = await self.send(task, text, kind, markup=markup)
        message_id = await self._outbox.delivered(row_id)
        return Sent(message_id) if message_id is not None else None

    async def delivered(self, row_id: int) -> int | None:
        return await self._outbox.delivered(row_id)

    async def edit_row(
        self, chat_id: int, row_id: int, text: str, markup: Keyboard | None = None
    ) -> None:
        """Edit the message an outbox row became (queued after it, so it is sent by then);
        without ``markup`` its buttons are removed."""
        await self._outbox.edit(chat_id, None, text, markup, row_id=row_id)

    async def edit(
        self, chat_id: int, message_id: int, text: str, markup: Keyboard | None = None
    ) -> None:
        """Edit a message in place; without ``markup`` its buttons are removed."""
        await self._outbox.edit(chat_id, message_id, text, markup)

    async def archived(self, placed: Sequence[tuple[int, int]], newest: Sequence[Task]) -> None:
        """Archived tasks (``placed``: each one's id and chat): their forum topics are closed
        (``bot.telegram.topics``), and the cards of ``newest`` lose the buttons that no longer
        apply and say so, in one batch per chat (older cards' buttons answer that the task is
        archived)."""
        chats = dict(placed)
        for task_id in await self._store.topics.placed_in_topics(list(chats)):
            await self._outbox.close_topic(chats[task_id], task_id)
        by_chat: dict[int, list[Task]] = {}
        for task in newest:
            by_chat.setdefault(task.chat_id, []).append(task)
        for chat_tasks in by_chat.values():
            await self._lifecycle.buttons_follow_all(chat_tasks, "task.archived_note")

    async def retire(self, chat_id: int, row_id: int) -> None:
        """Remove the message an outbox row became (or never send it)."""
        await self._outbox.retire(chat_id, row_id)

    async def retire_live(self, task_ids: list[int], link_kind: MessageKind) -> None:
        """Remove what a crash left of these tasks' messages of ``link_kind`` (progress)."""
        for row_id, chat_id in await self._store.outbox.live(task_ids, link_kind):
            await self._outbox.retire(chat_id, row_id)
