"""The preflight's question or refusal in the chat, and what starts the held task: a suggested
answer's button, a reply with the owner's own words, "Start anyway", or the wait's end.

A hold is a row (``bot.store.preflights``), so a question survives a restart: its buttons and
replies are read from the table, and the wait's end is found by a poll of it. Exactly one of
them starts the task (``resolve`` closes a hold once)."""

from __future__ import annotations

import asyncio
import html
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Annotated

from pydantic import Field

from bot.approvals.copies import PendingAsk
from bot.errors import DetachError, UserInputError
from bot.models import CopyOf, MessageKind, PreflightDecision, Task
from bot.preflight.check import Outcome
from bot.preflight.copies import close_hold_copies, record_hold_copy
from bot.store import PendingCopy, Store
from bot.store.preflights import PreflightHold
from bot.telegram.callbacks import Id, TaskAction, TaskButton
from bot.telegram.markup import CallbackData, Keyboard
from bot.telegram.outbox import Outbox
from bot.telegram.policies import ChatPolicies
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)

ANYWAY = 9  # the choice of "Start anyway" (0..3: a suggested answer)
CANCEL = 8  # the choice of "Cancel" (an estimate over the budget)
OVER_BUDGET = "budget"  # a hold's decision: a go whose estimate is more than the task has left
POLL_MAX_S = 10.0  # the longest between two looks for holds whose wait has ended


class PreflightAction(CallbackData, prefix="pf"):
    hold_id: Id
    choice: Annotated[int, Field(ge=0, le=ANYWAY)]


class RunDefault(CallbackData, prefix="pfd"):
    """ "Run on <default> instead" under a routed task's acknowledgement: the engine and preset
    (\"\": the engine's own model) it was planned on before the preflight routed it."""

    task_id: Id
    engine: Annotated[str, Field(max_length=16)]
    preset: Annotated[str, Field(max_length=32)]


# starts a held task: the hold, the command's text to run, one line for its acknowledgement
Starter = Callable[[PreflightHold, str, str], Awaitable[Task]]


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
        self._start: Starter | None = None

    def bind(self, start: Starter) -> None:
        """What starts a held task (the task service's)."""
        self._start = start

    async def hold(
        self,
        *,
        owner_id: int,
        chat_id: int,
        locale: str,
        text: str,
        with_options: bool,
        reply_to: int | None,
        outcome: Outcome,
        over_budget: str = "",
    ) -> PreflightHold:
        """Hold the command (an ``ask`` or ``refuse`` verdict, or ``over_budget``: the line
        saying a go's estimate is more than the task has left) and post its message: the
        question with its suggested answers and "Start anyway", the refusal with "Start
        anyway", or the estimate with "Start anyway" and "Cancel". A command Telegram delivers
        twice is held once."""
        verdict = outcome.verdict
        assert verdict is not None and (over_budget or verdict.decision is not PreflightDecision.GO)
        if reply_to is not None and (known := await self._store.preflights.held(chat_id, reply_to)):
            return known
        ask = verdict.decision is PreflightDecision.ASK and not over_budget
        hold = await self._store.preflights.create(
            owner_id=owner_id,
            chat_id=chat_id,
            locale=locale,
            reply_to=reply_to,
            text=text,
            with_options=with_options,
            decision=OVER_BUDGET if over_budget else verdict.decision.value,
            question=verdict.question if ask else "",
            answers=verdict.answers if ask else (),
            reason=over_budget or verdict.reason,
            cost_usd=outcome.cost_usd,
            deadline=self._store.preflights.now() + timedelta(seconds=self.wait_s) if ask else None,
        )
        body = self._body(hold)
        kind = MessageKind.BUDGET if over_budget else MessageKind.QUESTION
        row_id = await self._outbox.send(
            chat_id,
            body,
            markup=self._keyboard(hold),
            reply_to=reply_to,
            html=False,
            silent=await self._silent(chat_id, kind),
        )
        await self._store.preflights.set_row(hold.id, row_id)
        return hold

    async def held(self, chat_id: int, reply_to: int) -> bool:
        """This command message is held already (Telegram delivered it twice)."""
        return await self._store.preflights.held(chat_id, reply_to) is not None

    async def on_button(self, user_id: int, hold_id: int, choice: int) -> str:
        """A tap: a suggested answer or "Start anyway"; the key of the tap's short answer."""
        hold = await self._store.preflights.get(hold_id)
        if hold is None or hold.owner_id != user_id:
            return "preflight.gone"
        if choice == ANYWAY:
            return await self._settle(hold, "anyway", "", "preflight.started_anyway")
        if choice == CANCEL:
            return await self._cancel(hold)
        if choice >= len(hold.answers):
            return "preflight.gone"
        return await self._settle(hold, "answered", hold.answers[choice], "preflight.answered")

    async def on_reply(self, user_id: int, chat_id: int, message_id: int, text: str) -> bool:
        """A reply to a pending question's message, or to a copy of it /pending showed (which
        says so too), answers it with the owner's words; False: the message replied to is no
        pending question of this owner."""
        for hold in await self._store.preflights.pending():
            if hold.owner_id != user_id:
                continue
            copies = await self._store.copies.of(CopyOf.HOLD, hold.id)
            rows = [c.row_id for c in copies if c.chat_id == chat_id]
            if hold.chat_id == chat_id and hold.row_id is not None:
                rows.insert(0, hold.row_id)
            for row_id in rows:
                if await self._store.outbox.message_id_of(row_id) == message_id:
                    await self._settle(hold, "answered", text.strip(), "preflight.answered")
                    return True
        return False

    async def run_forever(self) -> None:
        """Start the held tasks whose question waited ``wait_s`` unanswered (after a restart
        too: the deadline is stored)."""
        every = min(POLL_MAX_S, max(self.wait_s / 10, 0.1))
        while True:
            try:
                for hold in await self._store.preflights.due(self._store.preflights.now()):
                    await self._settle(hold, "expired", "", "preflight.no_answer")
            except DetachError:
                log.exception("preflight: a held task could not be started")
            await asyncio.sleep(every)

    async def _settle(self, hold: PreflightHold, status: str, answer: str, note_key: str) -> str:
        """Close the hold (once), take its buttons away, and start its task with ``answer``
        (or the note that none came) added to the goal."""
        if self._start is None or not await self._store.preflights.resolve(hold.id, status, answer):
            return "preflight.gone"
        if hold.row_id is not None:
            await self._outbox.edit_markup(hold.chat_id, hold.row_id, None)
        await close_hold_copies(self._store, self._outbox, hold.id)
        locale = hold.locale
        if status == "answered":
            text = (
                hold.text
                + "\n\n"
                + self._plain(locale, "preflight.clarified", question=hold.question, answer=answer)
            )
            note = self._plain(locale, note_key, answer=answer)
        elif status == "expired":
            text = (
                hold.text
                + "\n\n"
                + self._plain(locale, "preflight.best_judgement", question=hold.question)
            )
            note = self._plain(locale, note_key)
        else:
            text, note = hold.text, self._plain(locale, note_key)
        try:
            task = await self._start(hold, text, note)
        except DetachError as exc:  # the daily cap reached meanwhile, the engine gone, ...
            await self._not_started(hold, exc)
            return "preflight.not_started_short"
        await self._store.preflights.started(hold.id, task.id)
        return "preflight.starting"

    async def _not_started(self, hold: PreflightHold, exc: DetachError) -> None:
        """Tell the owner, in one message, that the held task did not start, and why."""
        log.warning("preflight hold %s: its task could not start: %r", hold.id, exc)
        if isinstance(exc, UserInputError):
            reason = self._texts.get(hold.locale, exc.key, **exc.params)
        else:
            reason = self._texts.get(hold.locale, "error.internal")
        body = self._texts.template(hold.locale, "preflight.not_started").format(reason=reason)
        silent = await self._silent(hold.chat_id, MessageKind.RESULT)  # its outcome
        await self._outbox.send(hold.chat_id, body, reply_to=hold.reply_to, silent=silent)

    async def _silent(self, chat_id: int, kind: MessageKind) -> bool:
        return self._policies is not None and await self._policies.silent(chat_id, kind)

    async def _cancel(self, hold: PreflightHold) -> str:
        """ "Cancel" under an estimate over the budget: the task is never started."""
        if not await self._store.preflights.resolve(hold.id, "cancelled", ""):
            return "preflight.gone"
        if hold.row_id is not None:
            await self._outbox.edit_markup(hold.chat_id, hold.row_id, None)
        await close_hold_copies(self._store, self._outbox, hold.id)
        return "preflight.cancelled"

    async def offer_default(self, task: Task, engine: str, preset: str | None) -> None:
        """Add "Run on <default> instead" to a routed task's acknowledgement (next to its
        Cancel); it goes when the task starts (the acknowledgement's buttons follow it)."""
        found = await self._store.outbox.first_send(task.id, "ack")
        if found is None or len(engine) > 16 or len(preset or "") > 32:
            return
        row_id, chat_id, _ = found
        back = RunDefault(task_id=task.id, engine=engine, preset=preset or "")
        caption = self._plain(task.locale, "preflight.run_default", name=preset or engine)
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

    def _body(self, hold: PreflightHold) -> str:
        """The hold's message: its question, its estimate over the budget, or its refusal."""
        if hold.decision == OVER_BUDGET:
            return hold.reason
        if hold.decision == PreflightDecision.ASK.value:
            minutes = max(1, round(self.wait_s / 60))
            return self._plain(
                hold.locale, "preflight.question", question=hold.question, minutes=minutes
            )
        return self._plain(hold.locale, "preflight.refusal", reason=hold.reason)

    async def pending(self, user_id: int) -> list[PendingAsk]:
        """The owner's held tasks, oldest first, for /pending: the message, the command it
        holds, and the original's buttons (a tap on the copy is a tap on the original)."""
        holds = [h for h in await self._store.preflights.pending() if h.owner_id == user_id]
        return [
            PendingAsk(
                CopyOf.HOLD,
                h.id,
                self._texts.get(h.locale, "pending.held", body=self._body(h), command=h.text),
                self._keyboard(h),
            )
            for h in holds
        ]

    async def copied(self, hold_id: int, chat_id: int, row_id: int) -> None:
        """/pending showed a copy of the hold (outbox row ``row_id``): its buttons go when the
        hold settles."""
        await record_hold_copy(
            self._store, self._outbox, self._texts, hold_id, PendingCopy(chat_id, row_id)
        )

    def _keyboard(self, hold: PreflightHold) -> Keyboard:
        rows = [
            [PreflightAction(hold_id=hold.id, choice=i).button(a)]
            for i, a in enumerate(hold.answers)
        ]
        anyway = self._texts.template(hold.locale, "preflight.anyway")
        rows.append([PreflightAction(hold_id=hold.id, choice=ANYWAY).button(anyway)])
        if hold.decision == OVER_BUDGET:
            cancel = self._texts.template(hold.locale, "preflight.cancel")
            rows[-1].append(PreflightAction(hold_id=hold.id, choice=CANCEL).button(cancel))
        return Keyboard.of(rows)

    def _plain(self, locale: str, key: str, **params: object) -> str:
        return self._texts.template(locale, key).format(**params)
