"""Everything the bot tells a user about a task, sent in the task owner's locale and linked to the
task, so that a reply to any of these messages continues it."""

from __future__ import annotations

import html
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bot.models import (
    ApprovalMode,
    CheckResult,
    Engine,
    ProcessRole,
    Task,
    TaskStatus,
    Turn,
    WorktreeState,
)
from bot.store import Runner, Store
from bot.telegram.callbacks import (
    CARD_ACTIONS,
    WORKTREE_ACTIONS,
    TaskAction,
    run_on,
    task_keyboard,
)
from bot.telegram.cards import card_header
from bot.telegram.lifecycle import TaskMessages
from bot.telegram.markup import Keyboard, Markup
from bot.telegram.outbox import Outbox
from bot.telegram.policies import ChatPolicies
from bot.telegram.render import (
    MAX_CHUNKS,
    STATUS_ICONS,
    markdown_chunks,
    shorten,
    split_text,
)
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)
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
        self.policies = ChatPolicies(store)

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
    ) -> None:
        """``origin`` (already HTML): where a task that no message started came from; ``note``
        (plain): one line more, such as why the sandbox is not used."""
        loc = task.locale
        text = self._texts.get(
            loc,
            "task.ack",
            icon=STATUS_ICONS[task.status],
            label=task.label,
            status=self._texts.status(loc, task.status),
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
            kind="ack",
            reply_to=reply_to,
            markup=task_keyboard(self._texts, task.locale, task.id, ["cancel"]),
        )

    async def ack_status(self, task: Task) -> None:
        await self._lifecycle.ack_status(task)

    async def buttons_follow(self, task: Task, note: str | None = None) -> bool:
        return await self._lifecycle.buttons_follow(task, note)

    def _ack_mode(self, task: Task) -> str:
        """How the task may act, when it is not the usual asking: sandboxed, and its check."""
        parts = []
        if task.approval_mode is ApprovalMode.SANDBOX:
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
        key: str,
        resets: str,
        others: Sequence[Engine] = (),
        again: bool = False,
    ) -> None:
        """The task waits for its engine's usage limit (``task.limit_parked[_no_time]``), with
        buttons to go on with ``others`` now, to wait, or to cancel. ``again``: it waited
        before; its notice says the new time (no new message, no buzz)."""
        text = self._texts.get(
            task.locale,
            key,
            label=html.escape(task.label),
            engine=task.engine.capitalize(),
            resets=resets,
        )
        markup = task_keyboard(
            self._texts, task.locale, task.id, [run_on(e) for e in others], ["wait", "cancel"]
        )
        if again and await self._lifecycle.replace(task, "limit", text, markup):
            return
        await self.send(task, text, kind="limit", markup=markup)

    async def limit_wait_chosen(self, task: Task) -> None:
        """The owner chose to wait: the notice keeps its Cancel only."""
        markup = task_keyboard(self._texts, task.locale, task.id, ["cancel"])
        await self._lifecycle.replace(task, "limit", None, markup)

    async def limit_over(self, task: Task, engine: str, say: bool = True) -> None:
        """A task that waited for its engine's usage limit starts again: the waiting notice
        loses its buttons (the acknowledgement keeps a Cancel while it runs) and, when ``say``,
        one line says so."""
        await self._lifecycle.drop_buttons(task, "limit")
        if not say:
            return
        text = self._texts.get(
            task.locale, "task.limit_resumed", label=html.escape(task.label), engine=engine
        )
        await self.send(task, text, kind="status")  # no buzz: nothing to do (the card buzzes)

    async def engine_switched(self, task: Task, before: Engine) -> None:
        """The owner carried the task over to another engine: one quiet line (they just
        pressed the button), and the waiting notice loses its buttons."""
        await self._lifecycle.drop_buttons(task, "limit")
        text = self._texts.get(
            task.locale,
            "task.engine_switched",
            label=task.label,
            engine=task.engine.capitalize(),
            before=before.capitalize(),
        )
        await self.send(task, text, kind="status")

    async def mcp_followup(self, task: Task, client: str) -> None:
        """An MCP client queued the task's next turn: one quiet line, with Cancel."""
        text = self._texts.get(task.locale, "mcp.followup", label=task.label, client=client)
        markup = task_keyboard(self._texts, task.locale, task.id, ["cancel"])
        await self.send(task, text, kind="ack", markup=markup)

    async def followup_queued(self, task: Task, running: bool, reply_to: int | None) -> None:
        behind = self._texts.get(task.locale, "task.followup_behind") if running else ""
        text = self._texts.raw(
            task.locale, "task.followup_ack", label=html.escape(task.label), behind=behind
        )
        await self.send(
            task,
            text,
            kind="ack",
            reply_to=reply_to,
            markup=task_keyboard(self._texts, task.locale, task.id, ["cancel"]),
        )

    async def turn_finished(
        self, task: Task, turn: Turn, denials: Sequence[str] = (), changes: str = ""
    ) -> None:
        """The completion card: status line, what changed in the repository, the answer (split,
        or as a document), denials, and the card's buttons on its last message."""
        loc = task.locale
        check = await self._store.checks.for_turn(turn.id) if task.check else None
        children = await self._store.tasks.children(task.id) if task.subtasks else []
        header = card_header(self._texts, task, turn, check, children, changes)
        header += await self._price_note(task, turn)
        worktree = await self._store.worktrees.get(task.id)
        in_worktree = worktree is not None and worktree.state == WorktreeState.ACTIVE
        card = task_keyboard(
            self._texts, loc, task.id, CARD_ACTIONS, WORKTREE_ACTIONS if in_worktree else []
        )
        if check is not None and check.approved and not check.passed:
            await self._check_output(task, check)
        if turn.status not in (TaskStatus.DONE, TaskStatus.CHECK_FAILED):
            await self.send(task, header, kind="result", markup=card)
            return
        answer = (turn.result_text or "").strip() or self._texts.get(loc, "task.no_answer")
        chunks = markdown_chunks(answer)
        if len(chunks) > MAX_CHUNKS:
            await self._send_document(task, header, answer)
        else:
            for index, chunk in enumerate(chunks):
                last = index == len(chunks) - 1 and not denials
                await self.send(
                    task,
                    f"{header}\n\n{chunk}" if index == 0 else chunk,
                    kind="result",
                    markup=card if last else None,
                )
        if denials:
            items = "\n".join(f"• {d}" for d in denials[:10])
            await self.send(
                task, self._texts.get(loc, "task.denials", items=items), kind="result", markup=card
            )

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

    async def _check_output(self, task: Task, check: CheckResult) -> None:
        """The whole output of a failed check, as a file."""
        await self.send_file(
            task,
            check.output.encode(),
            f"{task.id}-{task.slug}-check-round{check.round}.txt",
            self._texts.get(task.locale, "check.output_caption", label=task.label),
        )

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
        await self.send(task, f"{text}\n<pre>{html.escape(check.tail(600))}</pre>", kind="status")

    async def _send_document(self, task: Task, header: str, answer: str) -> None:
        summary = self._texts.get(task.locale, "task.document_summary", chars=len(answer))
        preview = html.escape(split_text(answer, 1500)[0], quote=False)
        await self.send(task, f"{header}\n\n{preview}\n\n<i>{summary}</i>", kind="result")
        caption = self._texts.get(task.locale, "task.document_caption", label=task.label)
        await self.send_file(task, answer.encode(), f"{task.id}-{task.slug}.md", caption)

    async def send_file(self, task: Task, data: bytes, filename: str, caption: str) -> None:
        """A document about ``task``, through the outbox (linked to the task once delivered)."""
        await self._outbox.send_document(
            task.chat_id,
            data,
            filename,
            caption,
            task_id=task.id,
            link_kind="document",
            silent=await self._silent(task.chat_id, "document"),
        )

    async def _silent(self, chat_id: int, kind: str) -> bool:
        return await self.policies.silent(chat_id, kind)

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
            TaskAction.buttons(self._texts, loc, t.id, ["resume", "fail"], t.label)
            for t in tasks[:20]
        ]
        await self._outbox.send(
            chat_id,
            "\n".join(lines),
            task_id=tasks[0].id,
            link_kind="interrupted",
            silent=await self._silent(chat_id, "interrupted"),
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
        kind: str,
        reply_to: int | None = None,
        markup: Markup | None = None,
    ) -> int:
        """Queue a message about ``task`` (linked to it once delivered); returns its outbox row
        at once."""
        return await self._outbox.send(
            task.chat_id,
            text,
            markup=markup,
            reply_to=reply_to,
            task_id=task.id,
            link_kind=kind,
            silent=await self._silent(task.chat_id, kind),
        )

    async def send_and_wait(
        self, task: Task, text: str, kind: str, markup: Keyboard | None = None
    ) -> Sent | None:
        """Like ``send``, for the caller that needs the message id: waits for delivery, after
        the outbox's pacing (None when it failed or took too long)."""
        row_id = await self.send(task, text, kind, markup=markup)
        message_id = await self._outbox.delivered(row_id)
        return Sent(message_id) if message_id is not None else None

    async def delivered(self, row_id: int) -> int | None:
        return await self._outbox.delivered(row_id)

    async def edit_row(self, chat_id: int, row_id: int, text: str) -> None:
        """Edit the message an outbox row became (queued after it, so it is sent by then)."""
        await self._outbox.edit(chat_id, None, text, None, row_id=row_id)

    async def edit(
        self, chat_id: int, message_id: int, text: str, markup: Keyboard | None = None
    ) -> None:
        """Edit a message in place; without ``markup`` its buttons are removed."""
        await self._outbox.edit(chat_id, message_id, text, markup)

    async def retire(self, chat_id: int, row_id: int) -> None:
        """Remove the message an outbox row became (or never send it)."""
        await self._outbox.retire(chat_id, row_id)

    async def retire_live(self, task_ids: list[int], link_kind: str) -> None:
        """Remove what a crash left of these tasks' messages of ``link_kind`` (progress)."""
        for row_id, chat_id in await self._store.outbox.live(task_ids, link_kind):
            await self._outbox.retire(chat_id, row_id)
