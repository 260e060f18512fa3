"""A task's next turn (a follow-up, a resume, a retry, a budget extension): queued with what tells
the user of it, in one transaction, and refused while the task is held at the terminal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bot.errors import TaskHeld
from bot.models import MessageKind, Task, Turn
from bot.store import Store
from bot.tasks.placing import Placement
from bot.telegram.callbacks import TaskButton, task_keyboard
from bot.telegram.notifier import Notifier
from bot.telegram.terminal import hold_stamp
from bot.turns.outcome import local_time

Kick = Callable[[int], Awaitable[None]]


class NextTurns:
    def __init__(
        self,
        store: Store,
        notifier: Notifier,
        kick: Kick | None,
        timezone: str,
        placement: Placement | None = None,
    ) -> None:
        """``kick``: submits a task's next turn at once (None: a process that runs no turn,
        `detach mcp`; the bot's intake submits it); ``timezone``: for owners who set no /tz;
        ``placement``: the hosts, to say when a session's host is gone."""
        self._store = store
        self._placement = placement
        self._notifier = notifier
        self._kick = kick
        self._timezone = timezone

    async def queue(
        self,
        task: Task,
        user_id: int,
        prompt: str,
        action: str,
        notify: Callable[[Turn], Awaitable[None]],
        before: Callable[[], Awaitable[None]] | None = None,
        detail: str = "",
    ) -> Turn:
        """The turn, its audit line (``action``, ``detail``) and what ``notify`` tells the user
        of it commit together; then the turn is submitted. Refused (``TaskHeld``) while the
        task is at the terminal. ``before``: what the turn is conditional on, in the same
        transaction (what it raises undoes it all)."""
        async with self._store.atomic():
            await self.refuse_held(task)
            if before is not None:
                await before()
            turn = await self._store.tasks.add_turn(task.id, prompt)
            await self._store.audit.record(action, user_id, task.id, detail)
            await notify(turn)
            await self._session_gone(task)
            now = await self._store.tasks.get(task.id)
            assert now is not None  # a task is never deleted
            await self._notifier.ack_status(now)
            await self._notifier.buttons_follow(now)
        if self._kick is not None:
            await self._kick(task.id)
        return turn

    async def _session_gone(self, task: Task) -> None:
        """The task's session lives on a host that is offline: the turn waits for it, and one
        line says so with a fresh session elsewhere offered."""
        host = task.session_host if task.session_id else None
        if self._placement is None or host is None or await self._placement.online(host):
            return
        texts = self._notifier.texts
        line = texts.get(task.locale, "task.session_host_gone", label=task.label, host=host)
        markup = task_keyboard(texts, task.locale, task.id, [TaskButton.FRESH])
        await self._notifier.send(task, line, kind=MessageKind.STATUS, markup=markup)

    async def refuse_held(self, task: Task, park: tuple[int, str] | None = None) -> None:
        """``TaskHeld`` when ``task`` is held at the terminal (since when, in its owner's
        zone): phone and terminal never write the same session at once. ``park``: the refused
        reply (message id, text), kept for "Take back and send it"."""
        held = await self._store.terminal.get(task.id)
        if held is None:
            return
        zone = await self._store.users.tz(task.owner_id) or self._timezone
        since = local_time(held.since, zone)
        parked = park is not None and await self._store.terminal.park(task.id, *park)
        parked_id = park[0] if park and parked else None
        raise TaskHeld(task.id, task.label, since, parked_id, hold_stamp(held.since))
