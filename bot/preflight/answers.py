"""What settles a held task, exactly once: a suggested answer's button, a reply with the owner's
own words, "Start anyway", the wait's end (a question's), or "Drop".

A hold is a row (``bot.store.preflights``), so its buttons and replies are read from the table
and the wait's end is found by a poll of the stored deadlines (after a restart too). Whatever
settles it, ``resolve`` closes the hold once, the message and its /pending copies lose their
buttons, and (unless dropped) the bound ``HoldStarter`` starts the task; a start that fails is
told to the owner in one message."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from bot.errors import DetachError, UserInputError
from bot.models import CopyOf, MessageKind, Task
from bot.preflight.copies import close_hold_copies
from bot.preflight.message import ANYWAY, DROP, plain, silent
from bot.store import Store
from bot.store.preflights import PreflightHold
from bot.telegram.outbox import Outbox
from bot.telegram.policies import ChatPolicies
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)

POLL_MAX_S = 10.0  # the longest between two looks for holds whose wait has ended


class HoldStarter(Protocol):
    """What starts a held task, and forgets one that will not start."""

    async def start_held(self, hold: PreflightHold, more: str, line: str) -> Task:
        """Start the hold's task with ``more`` added to its goal and ``line`` on its
        acknowledgement."""
        ...

    def forget(self, hold: PreflightHold) -> None:
        """The hold will not start: what it kept (its files) goes."""
        ...


class HoldAnswers:
    """``wait_s``: how long a question waits for its answer; ``policies``: the chats' /notify
    choices (none: every message buzzes)."""

    def __init__(
        self,
        store: Store,
        outbox: Outbox,
        texts: Texts,
        wait_s: float,
        policies: ChatPolicies | None = None,
    ) -> None:
        self._store = store
        self._outbox = outbox
        self._texts = texts
        self._wait_s = wait_s
        self._policies = policies
        self._starter: HoldStarter | None = None

    def bind(self, starter: HoldStarter) -> None:
        """What starts a held task (the preflight step, ``bot.tasks.preflighting``)."""
        self._starter = starter

    async def on_button(self, user_id: int, hold_id: int, choice: int) -> str:
        """A tap: a suggested answer, "Start anyway" or "Drop"; the key of the tap's short
        answer."""
        hold = await self._store.preflights.get(hold_id)
        if hold is None or hold.owner_id != user_id:
            return "preflight.gone"
        if choice == ANYWAY:
            return await self._settle(hold, "anyway", "", "preflight.started_anyway")
        if choice == DROP:
            return await self._drop(hold)
        if not 0 <= choice < len(hold.answers):  # the board's number is checked here too
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
        every = min(POLL_MAX_S, max(self._wait_s / 10, 0.1))
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
        starter = self._starter
        if starter is None or not await self._store.preflights.resolve(hold.id, status, answer):
            return "preflight.gone"
        await self._take_buttons_away(hold)
        more, note = self._goal_and_note(hold, status, answer, note_key)
        try:
            task = await starter.start_held(hold, more, note)
        except DetachError as exc:  # the daily cap reached meanwhile, the engine gone, ...
            starter.forget(hold)
            await self._not_started(hold, exc)
            return "preflight.not_started_short"
        await self._store.preflights.started(hold.id, task.id)
        return "preflight.starting"

    def _goal_and_note(
        self, hold: PreflightHold, status: str, answer: str, note_key: str
    ) -> tuple[str, str]:
        """What the goal gets added (the question and its answer, or the note that none came)
        and the acknowledgement's line."""
        texts, locale = self._texts, hold.locale
        if status == "answered":
            clarified = plain(
                texts, locale, "preflight.clarified", question=hold.question, answer=answer
            )
            line = plain(
                texts, locale, "preflight.clarified_line", question=hold.question, answer=answer
            )
            return "\n\n" + clarified, line
        if status == "expired":
            judged = plain(texts, locale, "preflight.best_judgement", question=hold.question)
            return "\n\n" + judged, plain(texts, locale, note_key)
        return "", plain(texts, locale, note_key)

    async def _not_started(self, hold: PreflightHold, exc: DetachError) -> None:
        """Tell the owner, in one message, that the held task did not start, and why."""
        log.warning("preflight hold %s: its task could not start: %r", hold.id, exc)
        if isinstance(exc, UserInputError):
            reason = self._texts.get(hold.locale, exc.key, **exc.params)
        else:
            reason = self._texts.get(hold.locale, "error.internal")
        body = self._texts.template(hold.locale, "preflight.not_started").format(reason=reason)
        quiet = await silent(self._policies, hold.chat_id, MessageKind.RESULT)  # its outcome
        await self._outbox.send(hold.chat_id, body, reply_to=hold.reply_to, silent=quiet)

    async def _drop(self, hold: PreflightHold) -> str:
        """ "Drop": the task is never started (the row keeps "cancelled", as before)."""
        if self._starter is None or not await self._store.preflights.resolve(
            hold.id, "cancelled", ""
        ):
            return "preflight.gone"
        self._starter.forget(hold)
        await self._take_buttons_away(hold)
        await self._store.audit.record("preflight_drop", hold.owner_id, None, f"H{hold.id}")
        return "preflight.dropped"

    async def _take_buttons_away(self, hold: PreflightHold) -> None:
        """The settled hold's message and its /pending copies keep their text, not their
        buttons."""
        if hold.row_id is not None:
            await self._outbox.edit_markup(hold.chat_id, hold.row_id, None)
        await close_hold_copies(self._store, self._outbox, hold.id)
