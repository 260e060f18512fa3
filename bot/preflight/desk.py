"""The preflight's desk: it holds a task the preflight asked about or refused (or whose estimate
is over the budget), from whichever door it came, posts the hold's message to its chat, and shows
it again for /pending and the board.

A hold is a row (``bot.store.preflights``), so a question survives a restart. What settles it
and starts the task is ``bot.preflight.answers``; what the message looks like is
``bot.preflight.message``; a routed task's acknowledgement is ``bot.preflight.routed``. This
desk is the one face the use cases and the handlers use for all of them."""

from __future__ import annotations

import html
from datetime import timedelta

from bot.approvals.copies import PendingAsk
from bot.models import CopyOf, MessageKind, NewTask, PreflightDecision, Task
from bot.preflight.answers import HoldAnswers, HoldStarter
from bot.preflight.check import Outcome
from bot.preflight.copies import record_hold_copy
from bot.preflight.message import OVER_BUDGET, hold_body, hold_choices, hold_keyboard, silent
from bot.preflight.routed import RoutedAck
from bot.store import PendingCopy, Store, TaskFileRow
from bot.store.preflights import PreflightHold, encode_held
from bot.telegram.outbox import Outbox
from bot.telegram.policies import ChatPolicies
from bot.telegram.texts import Texts


class PreflightDesk:
    """``wait_s``: DETACH_PREFLIGHT_WAIT_S, how long a question waits for its answer.
    ``policies``: the chats' /notify choices, which its messages follow like a question
    (none: every message buzzes)."""

    def __init__(
        self,
        store: Store,
        outbox: Outbox,
        texts: Texts,
        wait_s: float,
        policies: ChatPolicies | None = None,
    ) -> None:
        self._policies = policies
        self._store = store
        self._outbox = outbox
        self._texts = texts
        self.wait_s = wait_s
        self._answers = HoldAnswers(store, outbox, texts, wait_s, policies)
        self._routed = RoutedAck(store, outbox, texts)

    def bind(self, starter: HoldStarter) -> None:
        """What starts (or forgets) a held task: the preflight step (``bot.tasks.preflighting``)."""
        self._answers.bind(starter)

    async def hold(
        self,
        new: NewTask,
        outcome: Outcome,
        *,
        reply_to: int | None = None,
        over_budget: str = "",
        file: TaskFileRow | None = None,
    ) -> PreflightHold:
        """Hold ``new`` (an ``ask`` or ``refuse`` verdict, or ``over_budget``: the line saying a
        go's estimate is more than the task has left) and post its message to its chat, in
        reply to ``reply_to`` (the command, when a person sent one): the question with its
        suggested answers, the refusal or the estimate, each with "Start anyway" and "Drop".
        ``file``: the task file it came from. A command Telegram delivers twice is held once."""
        verdict = outcome.verdict
        assert verdict is not None and (over_budget or verdict.decision is not PreflightDecision.GO)
        chat_id = new.chat_id
        if reply_to is not None and (known := await self._store.preflights.held(chat_id, reply_to)):
            return known
        hold = await self._store.preflights.create(
            owner_id=new.owner_id,
            chat_id=chat_id,
            locale=new.locale,
            reply_to=reply_to,
            text=new.title or new.prompt,
            with_options=False,
            task=encode_held(new, file),
            **self._what_is_held(outcome, over_budget),
        )
        await self._store.audit.record("preflight_hold", new.owner_id, None, f"H{hold.id}")
        await self._post(hold)
        return hold

    def _what_is_held(self, outcome: Outcome, over_budget: str) -> dict[str, object]:
        """The hold's decision, reason and cost; its question, answers and deadline only for an
        ``ask`` whose estimate is not over the budget."""
        verdict = outcome.verdict
        assert verdict is not None
        ask = verdict.decision is PreflightDecision.ASK and not over_budget
        deadline = self._store.preflights.now() + timedelta(seconds=self.wait_s) if ask else None
        return {
            "decision": OVER_BUDGET if over_budget else verdict.decision.value,
            "question": verdict.question if ask else "",
            "answers": verdict.answers if ask else (),
            "reason": over_budget or verdict.reason,
            "cost_usd": outcome.cost_usd,
            "deadline": deadline,
        }

    async def _post(self, hold: PreflightHold) -> None:
        """Send the hold's message in reply to its command and remember its outbox row."""
        kind = MessageKind.BUDGET if hold.decision == OVER_BUDGET else MessageKind.QUESTION
        row_id = await self._outbox.send(
            hold.chat_id,
            self._body(hold),
            markup=hold_keyboard(self._texts, hold),
            reply_to=hold.reply_to,
            html=False,
            silent=await silent(self._policies, hold.chat_id, kind),
        )
        await self._store.preflights.set_row(hold.id, row_id)

    def _body(self, hold: PreflightHold) -> str:
        return hold_body(self._texts, hold, self.wait_s)

    async def held(self, chat_id: int, reply_to: int) -> bool:
        """This command message is held already (Telegram delivered it twice)."""
        return await self._store.preflights.held(chat_id, reply_to) is not None

    async def on_button(self, user_id: int, hold_id: int, choice: int) -> str:
        """A tap (or the board's click): a suggested answer, "Start anyway" or "Drop"; the key
        of the tap's short answer."""
        return await self._answers.on_button(user_id, hold_id, choice)

    async def on_reply(self, user_id: int, chat_id: int, message_id: int, text: str) -> bool:
        """A reply to a pending question's message (or its /pending copy) answers it; False:
        the message replied to is no pending question of this owner."""
        return await self._answers.on_reply(user_id, chat_id, message_id, text)

    async def run_forever(self) -> None:
        """Start the held tasks whose question waited ``wait_s`` unanswered."""
        await self._answers.run_forever()

    async def offer_default(self, task: Task, engine: str, preset: str | None) -> None:
        """Add "Run on <default> instead" to a routed task's acknowledgement."""
        await self._routed.offer_default(task, engine, preset)

    async def moved_back(self, task: Task, routed_line: str, line: str) -> None:
        """The acknowledgement of a task moved back to its default says so."""
        await self._routed.moved_back(task, routed_line, line)

    async def holds_of(self, user_id: int) -> list[PreflightHold]:
        """The owner's held tasks, oldest first."""
        return [h for h in await self._store.preflights.pending() if h.owner_id == user_id]

    def shown(self, hold: PreflightHold) -> tuple[str, list[tuple[int, str]]]:
        """The hold's message (plain text) and its choices with their captions."""
        return self._body(hold), hold_choices(self._texts, hold)

    async def pending(self, user_id: int) -> list[PendingAsk]:
        """The owner's held tasks, oldest first, for /pending: the message, with the
        original's buttons (a tap on the copy is a tap on the original)."""
        return [
            PendingAsk(
                CopyOf.HOLD,
                h.id,
                html.escape(self._body(h), quote=False),
                hold_keyboard(self._texts, h),
            )
            for h in await self.holds_of(user_id)
        ]

    async def copied(self, hold_id: int, chat_id: int, row_id: int) -> None:
        """/pending showed a copy of the hold (outbox row ``row_id``): its buttons go when the
        hold settles."""
        await record_hold_copy(
            self._store, self._outbox, self._texts, hold_id, PendingCopy(chat_id, row_id)
        )
