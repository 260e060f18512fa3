"""Taps on approval and question buttons: only the task's owner, only once, only while pending."""

from __future__ import annotations

import logging

from bot.approvals.copies import edit_copies, record_copy
from bot.approvals.desk import ApprovalDesk
from bot.approvals.view import (
    DONE,
    ApprovalChoice,
    approval_keyboard,
    confirm_keyboard,
    grant_rule,
    question_item,
    question_keyboard,
    question_text,
)
from bot.errors import UserInputError
from bot.models import (
    ApprovalAnswer,
    QuestionKind,
    QuestionStatus,
    Task,
    TaskStatus,
)
from bot.ports import LostRunners
from bot.store import Grant, PendingCopy, PendingQuestion, Store
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)
_OUTCOME_KEYS = {ApprovalAnswer.ALLOW: "approval.allowed", ApprovalAnswer.DENY: "approval.denied"}
# the answers a person gives (the desk gives the others when nobody does)
OWNER_ANSWERS = frozenset({ApprovalAnswer.ALLOW, ApprovalAnswer.DENY, ApprovalAnswer.ALWAYS})
# what an answering button means (``ALWAYS`` and ``BACK`` only change the message)
CHOSEN = {
    ApprovalChoice.ALLOW: ApprovalAnswer.ALLOW,
    ApprovalChoice.DENY: ApprovalAnswer.DENY,
    ApprovalChoice.CONFIRM: ApprovalAnswer.ALWAYS,
}
_TOASTS = {
    ApprovalAnswer.ALLOW: "callback_approval.allowed",
    ApprovalAnswer.DENY: "callback_approval.denied",
    ApprovalAnswer.ALWAYS: "callback_approval.always",
}


class ApprovalAnswers:
    def __init__(
        self,
        store: Store,
        desk: ApprovalDesk,
        notifier: Notifier,
        texts: Texts,
        takeover: LostRunners | None = None,
    ) -> None:
        """``takeover``: on a shared database, a tap for a turn whose runner is gone takes its
        turns over (the task is offered for Resume) instead of answering nobody."""
        self._takeover = takeover
        self._store = store
        self._desk = desk
        self._notifier = notifier
        self._texts = texts

    async def _pending(
        self, user_id: int, qid: int, kind: QuestionKind
    ) -> tuple[PendingQuestion, Task]:
        question = await self._store.questions.get(qid)
        task = await self._store.tasks.get(question.task_id) if question else None
        if question is None or task is None or question.kind != kind:
            raise UserInputError("callback.stale")
        if task.owner_id != user_id:
            await self._store.audit.record("approval_refused", user_id, task.id, f"q{qid}")
            raise UserInputError("callback.not_yours")
        if question.status != QuestionStatus.PENDING:
            raise UserInputError(
                "callback_approval.expired"
                if question.status == QuestionStatus.EXPIRED
                else "callback_approval.answered"
            )
        if self._takeover is not None and await self._takeover.if_lost(task.id):
            raise UserInputError("callback_approval.runner_lost")
        return question, task

    async def on_approval(
        self, user_id: int, qid: int, choice: ApprovalChoice, where: tuple[int, int] | None = None
    ) -> str:
        """A tap on an approval's button: "Always…" shows the rule and asks to confirm, "Back"
        shows the first buttons again; the others answer (``give``). Returns the locale key
        of the short callback answer. ``where`` is the (chat, message) that was tapped: a tap
        can arrive before the message id is stored."""
        if choice in (ApprovalChoice.ALWAYS, ApprovalChoice.BACK):
            question, task = await self._pending(user_id, qid, QuestionKind.APPROVAL)
            loc, text = task.locale, question.payload.get("text", "")
            if choice == ApprovalChoice.BACK:
                await self._edit(question, text, approval_keyboard(self._texts, loc, qid), where)
                return "callback_approval.back"
            prompt = self._always_prompt(task, question)
            markup = confirm_keyboard(self._texts, loc, qid)
            await self._edit(question, f"{text}\n\n{prompt}", markup, where)
            return "callback_approval.confirm"
        return await self.give(user_id, qid, CHOSEN[choice], where)

    async def give(
        self, user_id: int, qid: int, answer: ApprovalAnswer, where: tuple[int, int] | None = None
    ) -> str:
        """The owner's answer to an approval, from any surface, in one step: ``ALWAYS`` allows
        and remembers the rule (the chat's confirmed "Always…", the board's "Always"). Only the
        owner's answers (``OWNER_ANSWERS``); returns the locale key of the short answer."""
        if answer not in OWNER_ANSWERS:
            raise UserInputError("callback.stale")
        question, task = await self._pending(user_id, qid, QuestionKind.APPROVAL)
        loc, text = task.locale, question.payload.get("text", "")
        if not await self._store.questions.resolve(qid, QuestionStatus.ANSWERED, answer):
            raise UserInputError("callback_approval.answered")
        outcome = self._texts.get(loc, _OUTCOME_KEYS.get(answer, "approval.allowed"))
        if answer == ApprovalAnswer.ALWAYS:
            grant = await self._remember(task, question)
            key = (
                "check.allowed_always" if "check" in question.payload else "approval.allowed_always"
            )
            outcome = self._texts.get(loc, key, rule=grant_rule(grant.pattern))
        await self._store.audit.record("approval_answered", user_id, task.id, f"q{qid}: {answer}")
        self._desk.settle(qid, answer)
        await self._edit(question, f"{text.rsplit(chr(10), 1)[0]}\n\n{outcome}", None, where)
        return _TOASTS[answer]

    def _always_prompt(self, task: Task, question: PendingQuestion) -> str:
        """What "Always" remembers: a tool rule for the engine in the task's directory, or a
        repository's exact check command (``bot.approvals.consent``)."""
        payload = question.payload
        if "check" in payload:
            return self._texts.get(
                task.locale, "check.always_prompt", repository=payload["grant_cwd"]
            )
        return self._texts.get(
            task.locale,
            "approval.always_prompt",
            rule=payload["rule"],
            engine=task.engine,
            cwd=task.cwd,
        )

    async def _remember(self, task: Task, question: PendingQuestion) -> Grant:
        """The grant of an "Always": the question's own engine and directory when it names
        them (a repository's check), else the task's."""
        payload = question.payload
        engine = payload.get("grant_engine", task.engine)
        cwd = payload.get("grant_cwd", task.cwd)
        rule = payload["rule"]
        grant = await self._store.grants.add(task.owner_id, engine, cwd, rule)
        await self._store.audit.record("grant_added", task.owner_id, task.id, rule)
        log.info("task %s: grant %s added for user %s", task.id, grant.id, task.owner_id)
        return grant

    async def on_option(
        self, user_id: int, qid: int, option: int, where: tuple[int, int] | None = None
    ) -> str:
        question, task = await self._pending(user_id, qid, QuestionKind.QUESTION)
        item = question_item(question.payload)
        valid = 0 <= option < len(item.options) or (option == DONE and item.multi)
        if not valid:  # DONE closes a multi-select only; a forged index is a stale button
            raise UserInputError("callback.stale")
        if item.multi and option != DONE:
            selected = await self._store.questions.toggle(qid, option)  # taps at once lose none
            if selected is None:
                raise UserInputError("callback_approval.answered")
            await self._edit(
                question,
                question_text(self._texts, task, item),
                question_keyboard(self._texts, task.locale, qid, item, selected),
                where,
            )
            return "callback_approval.selected"
        answer = await self._resolve(qid, item.options, None if item.multi else option)
        await self._store.audit.record("question_answered", user_id, task.id, f"q{qid}")
        self._desk.settle(qid, answer)
        await self._edit(
            question,
            self._texts.get(
                task.locale, "approval.question_answered", question=item.text, answer=answer
            ),
            None,
            where,
        )
        return "toast.answered"

    async def _resolve(self, qid: int, options: tuple[str, ...], option: int | None) -> str:
        """The question answered with ``option``, or (None: Done on a multi-select) with its
        selection as it stands when it closes (read in that transaction: a toggle just
        before is not lost)."""
        if option is None:
            answer = await self._store.questions.resolve_selected(qid, options)
        elif await self._store.questions.resolve(qid, QuestionStatus.ANSWERED, options[option]):
            answer = options[option]
        else:
            answer = None
        if answer is None:
            raise UserInputError("callback_approval.answered")
        return answer

    async def _edit(  # type: ignore[no-untyped-def]
        self, question: PendingQuestion, text: str, markup, where: tuple[int, int] | None
    ) -> None:
        """The question's own message, and the one tapped (``where``: a copy of it that
        /pending showed, or the original itself before its id was stored)."""
        targets = [where] if where is not None else []
        if question.chat_id is not None and question.message_id is not None:
            original = (question.chat_id, question.message_id)
            targets = [original] + [t for t in targets if t != original]
        elif question.row_id is not None:
            # its message id is not stored yet (delivered a moment ago): by its outbox row
            task = await self._store.tasks.get(question.task_id)
            if task is not None:
                await self._notifier.edit_row(task.chat_id, question.row_id, text, markup)
        for chat_id, message_id in targets:
            await self._notifier.edit(chat_id, message_id, text, markup)
        await edit_copies(self._store, self._notifier, question.id, text, markup)

    async def copied(self, qid: int, chat_id: int, row_id: int) -> None:
        """/pending showed a copy of the question (outbox row ``row_id``): it is edited with
        the original from now on (an answer, a timeout, the turn's end)."""
        copy = PendingCopy(chat_id, row_id)
        await record_copy(self._store, self._notifier, self._texts, qid, copy)

    async def keep_waiting(self, user_id: int, turn_id: int) -> str:
        """Keep waiting, tapped on a stall watchdog's message: it says no more of that turn,
        whichever process runs it (the answer is kept in the store, where that watchdog reads
        it before it speaks). Returns the toast's locale key; a second tap is told so, a tap
        after the turn ended is stale."""
        task = await self._running_turn_of(user_id, turn_id)
        notice = await self._store.stalls.silence(turn_id)
        if notice is None:
            again = await self._store.stalls.get(turn_id)
            if again is None:  # the turn ended meanwhile, or its watchdog never spoke
                raise UserInputError("callback.stale")
            raise UserInputError("stall.waiting_already")
        done = self._texts.get(task.locale, "stall.waiting")
        await self._notifier.edit_row(notice.chat_id, notice.row_id, f"{notice.text}\n\n{done}")
        log.info("task %s turn %s: kept waiting", task.id, turn_id)
        return "stall.wait_toast"

    async def stalled_task(self, user_id: int, turn_id: int) -> int:
        """The task of a stalled turn that still runs, read from the database: its Stop works
        whichever process runs the turn (the cancel reaches a worker through the store)."""
        return (await self._running_turn_of(user_id, turn_id)).id

    async def _running_turn_of(self, user_id: int, turn_id: int) -> Task:
        """The task of ``turn_id`` while that turn runs. Somebody else's turn is refused; a
        turn that has ended is stale."""
        turn = await self._store.tasks.get_turn(turn_id)
        task = await self._store.tasks.get(turn.task_id) if turn is not None else None
        if task is None or turn is None:
            raise UserInputError("callback.stale")
        if task.owner_id != user_id:
            raise UserInputError("callback.not_yours")
        if turn.status is not TaskStatus.RUNNING:
            raise UserInputError("callback.stale")
        return task

    async def grants(self, user_id: int) -> list[Grant]:
        return await self._store.grants.active(user_id)

    async def revoke(self, user_id: int, grant_id: int) -> Grant:
        grant = await self._store.grants.revoke(user_id, grant_id)
        if grant is None:
            raise UserInputError("error.grant_not_found")
        await self._store.audit.record("grant_revoked", user_id, None, grant.pattern)
        return grant
