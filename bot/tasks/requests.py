"""A task asked for from the chat, or by a task file or a schedule: where its preflight (when
on) comes between its plan and its start."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bot.models import Engine, NewTask, Task, TaskKind
from bot.tasks.planning import AUTO
from bot.telegram.attachments import mention
from bot.telegram.held import titled

if TYPE_CHECKING:
    from bot.tasks.preflighting import PreflightStep
    from bot.tasks.service import TaskService

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A task's command as the chat sent it: ``[key=value ...] prompt`` (``with_options=False``:
    all prompt), by ``command`` (``engine``: a session's engine, None for /detach);
    ``reply_to``: the command's message; ``attachments``: staged files; ``preflighted``: its
    preflight ran before (the line to show instead of running it again). Also what a held task
    is started from again, its preflight's cost ``spent_usd`` counted as the task's."""

    user_id: int
    chat_id: int
    kind: TaskKind
    text: str
    locale: str
    command: str
    engine: Engine | None = None
    reply_to: int | None = None
    with_options: bool = True
    attachments: Sequence[Path] = ()
    preflighted: str | None = None
    spent_usd: float = 0.0  # what its preflight cost (counts to the task's budget)


class TaskRequests:
    """Plans a requested task and starts it, through its preflight when it gets one
    (``step``: None, no preflight model here)."""

    def __init__(self, service: TaskService, step: PreflightStep | None) -> None:
        self._service = service
        self.step = step

    async def from_chat(self, request: ChatRequest, may_hold: bool = True) -> Task | None:
        """The task of ``request``. A command Telegram delivers twice starts one task; its
        attachments go into the task's directory, and the prompt says where. A walk-away task
        without attachments whose preflight asks a question or refuses is held (None, when
        ``may_hold``): its question or refusal goes to the chat, and the owner's answer starts
        it (``bot.preflight.desk``)."""
        service, r = self._service, request
        planned = await service.planner.plan_text(
            r.user_id, r.chat_id, r.kind, r.text, r.locale, r.command, engine=r.engine,
            with_options=r.with_options, attached=mention(list(r.attachments)),
        )  # fmt: skip
        new, options, words = planned.new, planned.options, planned.words
        if r.attachments:  # the chat shows the words and the files' names, not the plumbing
            new = dataclasses.replace(new, title=titled(words, r.attachments))
        if r.reply_to is not None:
            existing = await service.task_linked(r.chat_id, r.reply_to)
            if existing is not None:
                log.info("message %s already started task %s", r.reply_to, existing)
                return await service.get_own(r.user_id, existing)
        step = self.step
        options = self._auto(options) if r.engine is None else options
        wanted = step is not None and step.wanted(r.kind, r.engine is not None, options)
        if step is None or not (r.preflighted or wanted):
            return await service.start(new, reply_to=r.reply_to, attachments=r.attachments)
        if r.preflighted is not None:
            return await step.start_noted(new, r.preflighted, r)
        route = options.get("engine", "").lower() == AUTO
        return await step.start(new, r, may_hold and not r.attachments, route)

    async def walk_away(self, new: NewTask, options: dict[str, str]) -> Task:
        """``start`` for a task file or a schedule's run: its preflight first (when on and it
        is no agent's sub-task), whose verdict its acknowledgement shows; nothing is held
        (nobody is there to answer at once)."""
        step, options = self.step, self._auto(options)
        if step is None or new.parent_id is not None or not step.wanted(new.kind, False, options):
            return await self._service.start(new)
        n = new
        request = ChatRequest(
            n.owner_id, n.chat_id, n.kind, n.prompt, n.locale, "detach", with_options=False
        )
        route = options.get("engine", "").lower() == AUTO
        task = await step.start(new, request, may_hold=False, route=route)
        assert task is not None  # not held: may_hold=False
        return task

    def _auto(self, options: dict[str, str]) -> dict[str, str]:
        """``options`` with ``engine=auto`` when DETACH_DEFAULT_ENGINE=auto and neither an
        engine nor a model is named (a model named is the owner's choice: it stays)."""
        if not self._service.planner.defaults.route_by_default:
            return options
        if "engine" in options or "model" in options:
            return options
        return {**options, "engine": AUTO}
