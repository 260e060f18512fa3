"""A walk-away task's preflight, between its plan and its start: the verdict on its
acknowledgement, a question or refusal that holds it, the owner's answer that starts it."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from bot.models import NewTask, Task, TaskKind
from bot.preflight.check import Outcome
from bot.preflight.desk import PreflightDesk
from bot.preflight.gate import PreflightGate
from bot.store.preflights import PreflightHold
from bot.tasks.options import flag
from bot.tasks.planning import AUTO
from bot.tasks.requests import ChatRequest

if TYPE_CHECKING:
    from bot.tasks.service import TaskService
    from bot.turns.queue import TurnQueue


class PreflightStep:
    def __init__(self, gate: PreflightGate, service: TaskService, queue: TurnQueue) -> None:
        self._gate = gate
        self._service = service
        self._queue = queue
        self.desk: PreflightDesk = gate.desk
        gate.desk.bind(self._start_held)

    def wanted(self, kind: TaskKind, engine_given: bool, options: dict[str, str]) -> bool:
        """Walk-away tasks only (never /claude, /codex), when on, or ``preflight=yes``, or
        ``engine=auto`` (the preflight routes it)."""
        walk_away = kind is TaskKind.DETACH and not engine_given
        auto = options.get("engine", "").lower() == AUTO
        return walk_away and flag(options, "preflight", self._gate.enabled or auto)

    async def start(
        self, new: NewTask, command: ChatRequest, may_hold: bool, route: bool = False
    ) -> Task | None:
        """Run the preflight, then start ``new`` with its verdict on the acknowledgement; or,
        ``may_hold`` and the verdict asks or refuses, hold the command (None). ``route``
        (``engine=auto``): a go's cheaper preset of the same engine replaces ``new``'s."""
        gate, chat_id, reply_to = self._gate, command.chat_id, command.reply_to
        if may_hold and reply_to is not None and await gate.desk.held(chat_id, reply_to):
            return None  # Telegram delivered the command again: it is held already
        await self._service.money.check_daily_cap(command.user_id)  # not a cent past the cap
        outcome = await gate.check(new)  # bounded; a failure is said, never raised
        if may_hold and gate.holds(outcome):
            await gate.desk.hold(
                owner_id=command.user_id,
                chat_id=chat_id,
                locale=command.locale,
                text=command.text,
                with_options=command.with_options,
                reply_to=reply_to,
                outcome=outcome,
            )
            return None
        if route:
            new = await self._routed(new, outcome)
        task = await self._service.start(gate.noted(new, outcome), reply_to, command.attachments)
        await gate.charge(task, outcome.cost_usd)
        return task

    async def _routed(self, new: NewTask, outcome: Outcome) -> NewTask:
        """``new`` on the preset the preflight suggests (already checked: on offer, priced, no
        dearer than the task's own, else the engine's dearest), if it is of the same engine
        and no usage limit holds it; else ``new`` unchanged. Routing only ever goes down."""
        chosen = outcome.verdict.preset if outcome.verdict is not None else None
        if chosen is None or chosen.engine != new.engine or chosen.name == new.preset:
            return new
        if await self._queue.limited_until(chosen.engine) is not None:
            return new
        line = self._gate.routed_line(new.locale, chosen.name, new.preset)
        return self._gate.noted_line(replace(new, preset=chosen.name, model=chosen.model), line)

    async def start_noted(self, new: NewTask, line: str, command: ChatRequest) -> Task:
        """Start ``new``, whose preflight ran before, with ``line`` on its acknowledgement."""
        noted = self._gate.noted_line(new, line)
        return await self._service.start(noted, command.reply_to, command.attachments)

    async def _start_held(self, hold: PreflightHold, text: str, line: str) -> Task:
        """A task its preflight held, started by the owner's answer (or the wait's end)."""
        task = await self._service.start_from_chat(
            ChatRequest(
                hold.owner_id,
                hold.chat_id,
                TaskKind.DETACH,
                text,
                hold.locale,
                "detach",
                reply_to=hold.reply_to,
                with_options=hold.with_options,
                preflighted=line,
            )
        )
        await self._gate.charge(task, hold.cost_usd)
        return task

    async def tap(self, user_id: int, hold_id: int, choice: int) -> str:
        """A button of a preflight's question or refusal; the key of the tap's answer."""
        return await self.desk.on_button(user_id, hold_id, choice)

    async def answered(self, user_id: int, chat_id: int, message_id: int, text: str) -> bool:
        """A reply to a preflight's question answers it; False: ``message_id`` is none."""
        return bool(text.strip()) and await self.desk.on_reply(user_id, chat_id, message_id, text)
