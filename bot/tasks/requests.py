"""A task asked for by any door (the chat's text and files, a voice draft, a task file, a
schedule's run, `detach add`, an MCP client): planned, then admitted the one way every door
shares: started, or through its preflight (when it gets one), which may hold it for its owner."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.models import Engine, NewTask, Task, TaskKind
from bot.store import Store, TaskFileRow
from bot.store.preflights import PreflightHold
from bot.tasks.creation import TaskCreator
from bot.tasks.lookup import TaskLookup
from bot.tasks.planning import AUTO, TaskPlanner
from bot.tasks.preflighting import PreflightStep, record_file
from bot.telegram.attachments import mention
from bot.telegram.held import titled

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A task's command as the chat sent it: ``[key=value ...] prompt`` (``with_options=False``:
    all prompt), by ``command`` (``engine``: a session's engine, None for /detach);
    ``reply_to``: the command's message; ``attachments``: staged files."""

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


class TaskRequests:
    """Creating a task, from any door: planned, then admitted (started, or held by its
    preflight). ``step``: None, no preflight model here."""

    def __init__(
        self,
        *,
        planner: TaskPlanner,
        creator: TaskCreator,
        lookup: TaskLookup,
        step: PreflightStep | None,
        store: Store,
    ) -> None:
        self._planner = planner
        self._creator = creator
        self._lookup = lookup
        self._store = store
        self.step = step
        self.start = creator.start  # a planned task, started as is (no preflight)
        self.plan = planner.plan  # a task's options and words, as the chat's command plans them
        self.engines = planner.engines  # those a task may run on here
        defaults = planner.defaults
        self.plain_text_tasks = defaults.plain_text_tasks
        self.attachments_staging = defaults.attachments_staging  # the chat's files, staged
        self.max_attachment_bytes = defaults.max_attachment_bytes

    async def aclose(self) -> None:
        """Routed first turns' grace timers stop."""
        await self._creator.aclose()

    async def from_chat(self, request: ChatRequest) -> Task | None:
        """The task of ``request``; None: its preflight holds it until its owner answers. A
        command Telegram delivers twice starts one task; its attachments go into the task's
        directory (kept with its hold meanwhile), and the prompt says where."""
        r = request
        # whether the message started a task already: read while the task is planned
        linked = (
            asyncio.ensure_future(self._lookup.task_linked(r.chat_id, r.reply_to))
            if r.reply_to is not None
            else None
        )
        try:
            planned = await self._planner.plan_text(
                r.user_id, r.chat_id, r.kind, r.text, r.locale, r.command, engine=r.engine,
                with_options=r.with_options, attached=mention(list(r.attachments)),
            )  # fmt: skip
        except BaseException:
            if linked is not None:
                linked.cancel()
                await asyncio.gather(linked, return_exceptions=True)
            raise
        new, options, words = planned.new, planned.options, planned.words
        if r.attachments:  # the chat shows the words and the files' names, not the plumbing
            new = dataclasses.replace(new, title=titled(words, r.attachments))
        if linked is not None and (existing := await linked) is not None:
            log.info("message %s already started task %s", r.reply_to, existing)
            return await self._lookup.get_own(r.user_id, existing)
        admitted = await self._admit(new, options, r.engine is not None, r.reply_to, r.attachments)
        return admitted if isinstance(admitted, Task) else None

    async def walk_away(
        self, new: NewTask, options: dict[str, str], file: TaskFileRow | None = None
    ) -> Task | PreflightHold:
        """The task of a door with nobody at it (a task file: ``file``, which `detach add` and
        MCP clients write too; a schedule's run), or its hold: its question waits for an answer
        as long as in the chat, and its refusal or estimate for "Start anyway"."""
        admitted = await self._admit(new, options, False, file=file)
        if isinstance(admitted, Task):
            await record_file(self._store, admitted, file)
        return admitted

    async def _admit(
        self,
        new: NewTask,
        options: dict[str, str],
        engine_given: bool,
        reply_to: int | None = None,
        attachments: Sequence[Path] = (),
        file: TaskFileRow | None = None,
    ) -> Task | PreflightHold:
        """The one rule of every door: a walk-away task gets its preflight when it is wanted
        (``PreflightStep.wanted``), which may hold it; any other starts now."""
        step = self.step
        options = options if engine_given else self._auto(options)
        if step is None or not step.wanted(new.kind, engine_given, options):
            return await self._creator.start(new, reply_to=reply_to, attachments=attachments)
        route = options.get("engine", "").lower() == AUTO
        return await step.start(new, reply_to, attachments, route, file)

    def _auto(self, options: dict[str, str]) -> dict[str, str]:
        """``options`` with ``engine=auto`` when DETACH_DEFAULT_ENGINE=auto and neither an
        engine nor a model is named (a model named is the owner's choice: it stays)."""
        if not self._planner.defaults.route_by_default:
            return options
        if "engine" in options or "model" in options:
            return options
        return {**options, "engine": AUTO}
