"""What the buttons under a task offer beyond start and cancel: follow up, transcript, retry,
the answer to a budget question (extend and continue, or stop), and /result's card again."""

from __future__ import annotations

import html
import io

from bot.approvals.copies import edit_copies, first_line
from bot.errors import UserInputError
from bot.git.worktrees import Worktrees
from bot.models import (
    ApprovalAnswer,
    MessageKind,
    QuestionKind,
    QuestionStatus,
    Task,
    TaskStatus,
    Turn,
)
from bot.money.desk import MoneyDesk
from bot.store import PendingQuestion, Store
from bot.tasks.export import export
from bot.tasks.jsonl import write_jsonl
from bot.tasks.lookup import TaskLookup
from bot.tasks.nextturn import NextTurns
from bot.tasks.unanswered import no_answer_yet
from bot.telegram.markup import ForceReply
from bot.telegram.notifier import Notifier
from bot.telegram.render import usd
from bot.telegram.texts import Texts
from bot.turns.transcript import human_line

MOVED_ON = "callback_approval.expired"  # the reply to a tap on a decision the task moved past


class TaskCard:
    def __init__(
        self,
        *,
        lookup: TaskLookup,
        turns: NextTurns,
        money: MoneyDesk,
        worktrees: Worktrees,
        store: Store,
        notifier: Notifier,
        texts: Texts,
    ) -> None:
        self._lookup = lookup
        self._turns = turns
        self._money = money
        self._worktrees = worktrees
        self._store = store
        self._notifier = notifier
        self._texts = texts

    async def answer_budget(self, user_id: int, qid: int, extend: bool) -> Task:
        """Extend raises the task's budget and resumes the same session; Stop closes it. The
        question's own state answers first (a second tap says it was answered); Extend is
        conditional on the task still stopped at its budget, in the transaction that closes
        the question and queues the turn, so a follow-up landing meanwhile wins whole."""
        question = await self._store.questions.get(qid)
        task = await self._store.tasks.get(question.task_id) if question else None
        if question is None or task is None or question.kind != QuestionKind.BUDGET:
            raise UserInputError("callback.stale")
        if task.owner_id != user_id:
            raise UserInputError("callback.not_yours")
        if question.status == QuestionStatus.ANSWERED:
            raise UserInputError("callback_approval.answered")
        if question.status == QuestionStatus.EXPIRED:  # a newer decision replaced it
            raise UserInputError("callback_approval.expired")
        if task.status is not TaskStatus.BUDGET_EXCEEDED:  # a follow-up moved the task on
            await self._moved_on(task, question)
            raise UserInputError(MOVED_ON)
        if extend:
            return await self._extend(user_id, task, question)
        if not await self._store.questions.resolve(qid, QuestionStatus.ANSWERED, "stop"):
            raise UserInputError("callback_approval.answered")
        amount = float(question.payload.get("extend", 0))
        await self._store.audit.record("budget_stopped", user_id, task.id, f"{amount}")
        line = self._texts.get(task.locale, "money.stopped_line", spent=usd(task.total_cost_usd))
        await self._notifier.budget_answered(task, question, line)
        await self._copies_say(question, line)
        return task

    async def _extend(self, user_id: int, task: Task, question: PendingQuestion) -> Task:
        await self._money.check_daily_cap(user_id)
        await self._turns.refuse_held(task)  # before the question is closed: Extend stays
        amount = float(question.payload.get("extend", 0))

        async def claim() -> None:
            if not await self._store.questions.resolve(
                question.id, QuestionStatus.ANSWERED, "extend"
            ):
                raise UserInputError("callback_approval.answered")
            if not await self._store.tasks.raise_budget(task.id, amount):
                raise UserInputError(MOVED_ON)  # a follow-up since the read: all is undone
            await self._store.audit.record("budget_extended", user_id, task.id, f"{amount}")

        async def say(_turn: Turn) -> None:
            now = await self._lookup.get_own(user_id, task.id)
            line = self._texts.get(task.locale, "money.extended_line", cap=usd(now.max_usd or 0))
            await self._copies_say(question, line)
            await self._notifier.budget_answered(now, question, line)

        prompt = self._texts.get(task.locale, "money.continue_prompt")
        try:
            await self._turns.queue(task, user_id, prompt, "budget_continued", say, claim)
        except UserInputError as exc:
            if exc.key == MOVED_ON:
                await self._moved_on(task, question)
            raise
        return await self._lookup.get_own(user_id, task.id)

    async def _moved_on(self, task: Task, question: PendingQuestion) -> None:
        """The budget decision of a task a follow-up has moved on since is no longer asked:
        it expires, and its card and /pending copies lose the buttons and say so."""
        if not await self._store.questions.resolve(
            question.id, QuestionStatus.EXPIRED, ApprovalAnswer.SUPERSEDED
        ):
            return
        line = self._texts.get(task.locale, "money.budget_moved_on")
        await self._notifier.budget_answered(task, question, line)
        await self._copies_say(question, line)

    async def _copies_say(self, question: PendingQuestion, line: str) -> None:
        """/pending's copies of the budget decision lose their buttons and say the answer."""
        await edit_copies(
            self._store, self._notifier, question.id, f"{first_line(question)}\n\n{line}"
        )

    async def ask_follow_up(self, user_id: int, task_id: int) -> None:
        """A force-reply prompt linked to the task: the reply continues it."""
        task = await self._lookup.get_own(user_id, task_id)
        await self._turns.refuse_held(task)
        await self._notifier.send(
            task,
            self._texts.get(task.locale, "task.followup_prompt", label=task.label),
            kind=MessageKind.STATUS,
            markup=ForceReply(
                self._texts.get(task.locale, "task.followup_placeholder", label=task.label)[:64]
            ),
        )

    async def send_transcript(self, user_id: int, task_id: int, lines: int = 25) -> None:
        """The last events as a message; the whole transcript as a file when there is more."""
        task = await self._lookup.get_own(user_id, task_id)
        total = await self._store.transcript.count(task.id)
        loc = task.locale
        if total == 0:
            await self._notifier.send(
                task,
                self._texts.get(loc, "task.transcript_empty", label=task.label),
                kind=MessageKind.STATUS,
            )
            return
        tail = await self._store.transcript.tail(task.id, lines)
        shown = [human_line(line.kind, line.body) for line in tail]
        body = "\n".join(line for line in shown if line is not None)[-3300:]
        header = self._texts.get(
            loc, "task.transcript_header", label=task.label, count=len(tail), total=total
        )
        await self._notifier.send(
            task, f"{header}\n<pre>{html.escape(body)}</pre>", kind=MessageKind.STATUS
        )
        if total > lines:
            out = io.StringIO()
            await self._store.transcript.write_all(task.id, out, human_line)
            await self._notifier.send_file(
                task,
                out.getvalue().encode(),
                f"{task.id}-{task.slug}-transcript.txt",
                self._texts.get(loc, "task.transcript_file", label=task.label),
            )

    async def send_task_file(self, user_id: int, task_id: int) -> None:
        """The task as a task file (the detach skill's Markdown format), as a document."""
        task = await self._lookup.get_own(user_id, task_id)
        exported = await export(self._store, task.id, self._texts)
        await self._notifier.send_file(
            task,
            exported.encode(),
            f"{task.id}-{task.slug}.task.md",
            self._texts.get(task.locale, "task.task_file", label=task.label),
        )

    async def send_jsonl(self, user_id: int, task_id: int) -> None:
        """The task's transcript as JSON Lines (``bot/tasks/jsonl.py``), as a document."""
        task = await self._lookup.get_own(user_id, task_id)
        out = io.StringIO()
        count = await write_jsonl(self._store, task.id, out)
        await self._notifier.send_file(
            task,
            out.getvalue().encode(),
            f"{task.id}-{task.slug}.transcript.jsonl",
            self._texts.get(task.locale, "task.jsonl_file", label=task.label, count=count),
        )

    async def retry(self, user_id: int, task_id: int) -> Task:
        """Run the last request again, in the same session."""
        task = await self._lookup.get_idle(user_id, task_id)
        await self._money.check_daily_cap(user_id)
        last = await self._store.tasks.last_turn(task.id)
        await self._turns.queue(
            task,
            user_id,
            last.prompt if last else task.title,
            "retry",
            lambda turn: self._notifier.turn_note(
                task, turn.id, "task.retrying", "task.retry_state"
            ),
        )
        return task

    async def show_result(self, user_id: int, task_id: int) -> None:
        """Send the last answer of a task again (as the completion card), or say there is none."""
        task = await self._lookup.get_own(user_id, task_id)
        turn = await self._store.tasks.last_turn(task.id)
        if turn is None or turn.status.active:
            raise await no_answer_yet(self._store, self._texts, task, turn)
        work = await self._worktrees.offers(task.id)
        await self._notifier.turn_finished(task, turn, worktree_work=work)
