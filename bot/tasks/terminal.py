"""Hand-off between the phone and a terminal. 🖥 To terminal holds an idle task there: its
session is the terminal's (``claude --resume <id>`` in its directory), and every turn from the
phone (a reply, Follow up, Retry, a budget's Extend, an MCP follow-up) is refused with one line
and a Take back button (``NextTurns.refuse_held``). 📱 Take back releases it: the next reply
resumes the session as the terminal left it (the CLI keeps what was said there in its session
files), and the transcript notes when the task was at the terminal.

A task whose turn runs or is queued is not held (the phone is writing its session): the owner
is told to hold it once the turn ended. Only the task's owner holds or takes back."""

from __future__ import annotations

import logging

from bot.errors import TaskStateError
from bot.models import MessageKind, Task
from bot.ports import TaskWorktrees
from bot.store import Store
from bot.tasks.chat import ChatSettings
from bot.tasks.followup import FollowUp, FollowUps
from bot.tasks.lookup import TaskLookup
from bot.tasks.nextturn import NextTurns
from bot.telegram.notifier import Notifier
from bot.telegram.terminal import (
    hold_stamp,
    take_back_keyboard,
    terminal_command,
    terminal_line,
)
from bot.telegram.texts import Texts
from bot.turns.outcome import local_time

log = logging.getLogger(__name__)
AT_TERMINAL = "AtTerminal"  # the transcript's line: from, to (ISO, UTC)


class TerminalDesk:
    def __init__(
        self,
        *,
        lookup: TaskLookup,
        turns: NextTurns,
        chat: ChatSettings,
        follow_ups: FollowUps,
        store: Store,
        notifier: Notifier,
        texts: Texts,
        worktrees: TaskWorktrees | None = None,
    ) -> None:
        """``worktrees``: a task's worktree merged or discarded is cut again where it stood
        before the terminal is given its command (``cd`` to it)."""
        self._lookup = lookup
        self._turns = turns
        self._chat = chat
        self._follow_ups = follow_ups
        self._store = store
        self._notifier = notifier
        self._texts = texts
        self._worktrees = worktrees

    async def hold(self, user_id: int, task_id: int) -> Task:
        """Hold the owner's idle task at the terminal; its chat gets the command and Take back."""
        task = await self._lookup.get_own(user_id, task_id)
        if terminal_command(task) is None:
            raise TaskStateError("terminal.no_session", label=task.label)
        if self._worktrees is not None and not task.status.active:
            await self._worktrees.reopen(task)
        async with self._store.atomic():  # a follow-up queued meanwhile is seen here
            task = await self._lookup.get_own(user_id, task_id)
            if task.status.active:
                raise TaskStateError("terminal.busy", label=task.label)
            held = await self._store.terminal.hold(task.id, user_id)
            if held is None:
                await self._turns.refuse_held(task)  # says since when
            assert held is not None
            await self._store.audit.record("terminal_held", user_id, task.id)
            since = local_time(held.since, await self._chat.zone(user_id))
            text = self._texts.get(task.locale, "terminal.held", label=task.label, since=since)
            text += "\n" + terminal_line(self._texts, task)
            stamp = hold_stamp(held.since)
            keyboard = take_back_keyboard(self._texts, task.locale, task.id, hold=stamp)
            row_id = await self._notifier.send(task, text, kind=MessageKind.STATUS, markup=keyboard)
            await self._store.terminal.set_row(task.id, row_id)
            await self._notifier.ack_status(task)  # it waits at the terminal
        log.info("task %s held at the terminal by %s", task.id, user_id)
        return task

    async def take_back(self, user_id: int, task_id: int, send: int = 0, hold: int = 0) -> Task:
        """Release the owner's task from the terminal; the transcript says from when to when.
        ``send``: "Take back and send it" on a reply refused while it was held (its message
        id): every reply refused during the hold becomes a turn, in the order they were sent
        (plain Take back drops them: the owner chose not to send them);
        ``hold``: the hold the tapped button was made for (0: whichever): a button left from
        an ended hold does not end a later one."""
        task = await self._lookup.get_own(user_id, task_id)
        async with self._store.atomic():
            current = await self._store.terminal.get(task.id)
            if current is None or (hold and hold_stamp(current.since) != hold):
                if send and await self._store.links.task_for(task.chat_id, send) == task.id:
                    raise TaskStateError("terminal.already_sent", label=task.label)
                raise TaskStateError("terminal.not_held", label=task.label)
            held = await self._store.terminal.release(task.id)
            if held is None:
                raise TaskStateError("terminal.not_held", label=task.label)
            now = self._store.terminal.now()
            last = await self._store.tasks.last_turn(task.id)
            if last is not None:
                body = {"from": held.since.isoformat(), "to": now.isoformat()}
                await self._store.transcript.append(task.id, last.id, [(AT_TERMINAL, body)])
            await self._store.audit.record("terminal_taken_back", user_id, task.id)
            zone = await self._chat.zone(user_id)
            text = self._texts.get(
                task.locale,
                "terminal.taken_back",
                label=task.label,
                since=local_time(held.since, zone),
                until=local_time(now, zone),
            )
            if held.row_id is None:
                await self._notifier.send(task, text, kind=MessageKind.STATUS)
            else:  # the message that said it is held says it is back, and loses Take back
                await self._notifier.edit_row(task.chat_id, held.row_id, text)
            await self._notifier.ack_status(task)
        log.info("task %s taken back from the terminal by %s", task.id, user_id)
        if send and send in held.parked:  # all of them, not only the tapped one's
            for message_id in sorted(held.parked):
                words = held.parked[message_id]
                asked = FollowUp(
                    user_id=user_id, task_id=task.id, prompt=words, reply_to=message_id
                )
                await self._follow_ups.follow_up(asked)
        return task
