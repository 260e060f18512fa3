"""What the machine's shell does with tasks, on the bot's database, for any owner (the shell is
the machine's): `detach add` queues a planned task, `detach adopt` records a terminal's session,
`detach list`, `show` and `export` read, `detach archive` archives. The running bot announces
and runs what is queued here, and delivers the outbox rows written here."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from bot.git.worktrees import Worktrees
from bot.models import CheckResult, NewTask, Task, TaskStatus, Turn
from bot.money.desk import MoneyDesk
from bot.money.presets import PresetCatalog
from bot.money.pricing import PriceList
from bot.redaction import Redactor
from bot.settings import Settings
from bot.store import Store, TranscriptLine
from bot.tasks.adoption import Adoptee, record
from bot.tasks.clients import ClientTasks, NoteRules, TurnPool
from bot.tasks.owner_ask import AskRules
from bot.tasks.placing import Placement
from bot.tasks.planning import TaskDefaults, TaskPlanner
from bot.telegram.slugs import slugify
from bot.workdirs import WorkdirPolicy
from executors.gitguard import GitGuard
from executors.sessions import FoundSession

if TYPE_CHECKING:
    from bot.telegram.notifier import Notifier

SHOWN_LINES = 20  # the transcript's tail `detach show` prints


@dataclass(frozen=True, slots=True)
class Shown:
    """A task as `detach show` prints it: its last check and turn, its transcript's tail,
    the model that ran it (``ran``: as its engine named it; None: none named)."""

    task: Task
    check: CheckResult | None
    turn: Turn | None
    lines: list[TranscriptLine]
    ran: str | None = None


class ConsoleTasks:
    def __init__(self, store: Store) -> None:
        self._store = store

    @classmethod
    @contextlib.asynccontextmanager
    async def opened(cls, url: str, redact: Redactor) -> AsyncIterator[ConsoleTasks]:
        """The use case on the database at ``url``, closed after the block."""
        store = await Store.open(url, redact=redact)
        try:
            yield cls(store)
        finally:
            await store.close()

    def planner(self, settings: Settings, guard: GitGuard, catalog: PresetCatalog) -> TaskPlanner:
        """The bot's planner as the shell has it: the same defaults, caps, directories and
        presets; every engine the bot knows (whether it is installed is the bot's to say) and
        no sandbox probe (the bot decides when it takes the task)."""
        from bot.telegram.texts import Texts
        from executors import registry

        worktrees = Worktrees(self._store, settings.data_dir / "worktrees", guard)
        return TaskPlanner(
            store=self._store,
            texts=Texts(),
            money=self.money(settings, catalog),
            workdirs=WorkdirPolicy(
                settings.default_workdir, settings.allowed_workdirs, internal=[worktrees.root]
            ),
            worktrees=worktrees,
            engines=registry.names(),
            defaults=TaskDefaults.of(settings),
            placement=Placement(
                self._store, dict(settings.projects), settings.jobs_database_url is not None
            ),
        )

    def money(self, settings: Settings, catalog: PresetCatalog) -> MoneyDesk:
        """The caps as the bot counts them."""
        return MoneyDesk(self._store, catalog, settings.daily_cap_usd, settings.task_cap_usd)

    def clients(self, owner: int, money: MoneyDesk, settings: Settings) -> ClientTasks:
        """What `detach mcp` lets a client do with ``owner``'s tasks."""
        limits = (settings.max_subtasks, settings.max_prompt_chars)
        notes = NoteRules(settings.notify_gap_s, settings.notify_max)
        return ClientTasks(
            self._store,
            owner=owner,
            money=money,
            limits=limits,
            timezone=settings.timezone,
            notes=notes,
            pool=TurnPool(settings.max_concurrent_turns),
            asks=AskRules(settings.preflight_wait_s, unattended=settings.ask_unattended),
        )

    async def locale_of(self, user_id: int) -> str:
        """The user's /lang, else English."""
        return (await self._store.users.locales()).get(user_id, "en")

    async def queue(self, new: NewTask) -> tuple[Task, datetime | None]:
        """``new`` queued for the bot, and when its engine's usage limit resets (None: none
        is reached now: its first turn waits for none)."""
        until = (await self._store.limits.active()).get(new.engine)
        task, _ = await self._store.tasks.create(new, slugify(new.prompt), waits=until is not None)
        await self._store.audit.record("task_created", new.owner_id, task.id, "shell")
        return task, until

    async def adopt(
        self, found: FoundSession, where: Path, who: Adoptee, catalog: PresetCatalog
    ) -> Task:
        """The session recorded as ``who``'s task, its tokens priced at ``catalog``'s prices."""
        task, _ = await record(self._store, found, where, who, PriceList(catalog.all()))
        return task

    async def get(self, task_id: int) -> Task | None:
        return await self._store.tasks.get(task_id)

    async def recent(self, limit: int = 50) -> list[tuple[Task, str | None]]:
        """The newest tasks, each with the model that ran it (one read for all, as the board)."""
        found = await self._store.tasks.list_for(None, limit=limit)
        ran = await self._store.ran.models([t.id for t in found])
        return [(t, ran.get(t.id)) for t in found]

    async def shown(self, task_id: int) -> Shown | None:
        task = await self._store.tasks.get(task_id)
        if task is None:
            return None
        return Shown(
            task,
            await self._store.checks.last(task.id),
            await self._store.tasks.last_turn(task.id),
            await self._store.transcript.tail(task.id, SHOWN_LINES),
            (await self._store.ran.models([task.id])).get(task.id),
        )

    async def export(self, task_id: int) -> str:
        """The task as a task file (``bot.tasks.export``)."""
        from bot.tasks.export import export
        from bot.telegram.texts import Texts

        return await export(self._store, task_id, Texts())

    async def export_jsonl(self, task_id: int, out: TextIO, after: int = 0) -> int:
        """The task's transcript as JSON Lines after line ``after`` (``bot.tasks.jsonl``),
        written to ``out``; how many events."""
        from bot.tasks.jsonl import write_jsonl

        return await write_jsonl(self._store, task_id, out, after)

    async def archive_all(self) -> int:
        """Every finished task archived in one statement, as `/archive all` does
        (``bot.tasks.lifecycle``): forum topics closed, the newest cards' buttons gone and
        "archived" said on them (outbox rows the running bot delivers); how many."""
        from bot.tasks.lifecycle import ARCHIVE_FOLLOW_MAX

        async with self._store.atomic():
            placed, newest = await self._store.tasks.archive_all(None, ARCHIVE_FOLLOW_MAX)
            await self._notifier().archived(placed, newest)
        return len(placed)

    async def archive(self, task_id: int) -> Task | None:
        """The task archived as `/archive <id>` does; None when it is missing or active."""
        task = await self._store.tasks.get(task_id)
        if task is None or task.status.active:
            return None
        async with self._store.atomic():
            await self._store.tasks.set_status(task.id, TaskStatus.ARCHIVED)
            now = await self._store.tasks.get(task.id)
            await self._notifier().archived([(task.id, task.chat_id)], [now] if now else [])
        return task

    def _notifier(self) -> Notifier:
        """What tells the chat, as the bot's own (its outbox rows; the bot sends them)."""
        from bot.telegram.notifier import Notifier
        from bot.telegram.outbox import Outbox
        from bot.telegram.texts import Texts

        return Notifier(self._store, Texts(), Outbox(self._store))
