"""Creating a task: refused on an engine not here, past the daily cap, or for a worktree outside
a repository; else the task, its first turn, its acknowledgement and its audit line commit
together, its attachments go into its directory, and its first turn is started (claimed here
when a slot is free), submitted, held for a routed task's grace, or left waiting for its
engine's usage limit to reset."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from bot import failpoints
from bot.errors import UserInputError
from bot.git.worktrees import Worktrees
from bot.models import Engine, MessageKind, NewTask, RepoHead, Task, TaskStatus, Turn
from bot.money.desk import MoneyDesk
from bot.store import Store
from bot.telegram.attachments import place
from bot.telegram.notifier import Notifier
from bot.telegram.slugs import given_slug, slugify
from bot.turns.openings import Openings
from bot.turns.pool import Claimed
from bot.turns.queue import TurnQueue

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Admission:
    """How a new task's first turn goes in: it ``waits`` for its engine's usage limit to
    reset, or is held ``hold_s`` seconds (a routed task's grace), else it is submitted."""

    waits: bool
    hold_s: float

    @property
    def held(self) -> bool:
        return self.hold_s > 0 and not self.waits  # a routed task's grace: unsubmitted till it ends

    @property
    def submitted(self) -> bool:
        return not (self.waits or self.held)


class TaskCreator:
    def __init__(
        self,
        *,
        store: Store,
        queue: TurnQueue,
        notifier: Notifier,
        money: MoneyDesk,
        worktrees: Worktrees,
        engines: Collection[Engine],
        openings: Openings,
    ) -> None:
        """``engines``: those tasks may use here (their start-up probe passed); ``openings``:
        where a first turn claimed here finds its baseline read as its task was created."""
        self._store = store
        self._queue = queue
        self._notifier = notifier
        self._money = money
        self._worktrees = worktrees
        self._engines = engines
        self._openings = openings
        self._later: set[asyncio.Task[None]] = set()  # held first turns, submitted soon

    async def start(
        self,
        new: NewTask,
        reply_to: int | None = None,
        attachments: Sequence[Path] = (),
        hold_s: float = 0.0,
    ) -> Task:
        """Create a task, acknowledge it in its chat, put its attachments in its directory,
        and queue its first turn; ``hold_s``: submit that turn only after so many seconds (a
        routed task's, which its owner may move back meanwhile; a restart submits it at once)."""
        if new.engine not in self._engines:
            raise UserInputError("error.engine_unavailable", engine=new.engine)
        await self._money.check_daily_cap(new.owner_id)
        # a worktree outside a repository is refused before anything is created (the planner
        # has looked its repository up; a NewTask made elsewhere has not)
        head = (new.head or await self._worktrees.head(new.cwd)) if new.worktree else None
        slug = given_slug(new.slug) if new.slug else slugify(new.title or new.prompt)
        # its engine's usage limit: it waits, and is submitted once that resets
        waits = await self._queue.limited_until(new.engine) is not None
        admission = Admission(waits, hold_s)
        # the first turn's baseline is read ahead only where nothing is placed after the commit
        ahead = not attachments
        task, turn, claimed = await self._create(new, slug, head, reply_to, admission, ahead)
        log.info("task %s created by %s (%s)", task.id, new.owner_id, new.engine)
        place(list(attachments), Path(task.cwd))
        await self._release(task.id, turn.id, claimed, admission)
        return task

    async def _create(
        self,
        new: NewTask,
        slug: str,
        head: RepoHead | None,
        reply_to: int | None,
        admission: Admission,
        ahead: bool = True,
    ) -> tuple[Task, Turn, Claimed | None]:
        """The task exists with its acknowledgement, or not (one transaction); its first turn,
        claimed here when it is submitted and a slot is free; ``ahead``: its baseline read
        meanwhile (``Openings``; not when files are placed in its directory after the commit:
        they are the owner's, not the turn's)."""
        # a slot is free: the first turn is inserted claimed, and starts once this commits
        claim = self._queue.claim_here() if admission.submitted else None
        async with self._reading_ahead() as read_ahead, self._store.atomic():
            task, turn = await self._store.tasks.create(
                new, slug, submitted=admission.submitted, waits=admission.waits, claim=claim
            )
            if admission.held:
                self._queue.hold(turn.id, admission.hold_s)
            if head is not None:
                task = await self._own_worktree(task, new.cwd, head)
            if claim is not None and ahead:
                read_ahead(turn.id, task.cwd)
            if reply_to is not None:
                await self._store.links.link(new.chat_id, reply_to, task.id, MessageKind.COMMAND)
            await self._store.audit.record("task_created", new.owner_id, task.id, new.engine)
            if new.announced:
                # a claimed one says queued, as before the claim moved into the insert
                shown = replace(task, status=TaskStatus.QUEUED) if claim is not None else task
                await self._notifier.acknowledge(
                    shown,
                    reply_to=reply_to,
                    origin=new.origin,
                    note=new.note,
                    elsewhere=new.host_offline,
                )
            failpoints.hit("task.before_commit")
        return task, turn, ((task, turn) if claim is not None else None)

    async def _release(
        self, task_id: int, turn_id: int, claimed: Claimed | None, admission: Admission
    ) -> None:
        """After the commit: the claimed first turn starts, a held one is submitted once its
        grace ends, a submitted one goes to the pool; one that waits stays queued."""
        if claimed is not None:
            self._queue.start(claimed)
        elif admission.held:
            later = self._submit_after(admission.hold_s, task_id, turn_id)
            self._later.add(asyncio.create_task(later))
        elif not admission.waits:
            await self._queue.submit(task_id, turn_id)

    async def aclose(self) -> None:
        """Stop the timers of routed first turns still in their grace (a restart submits such
        a turn again: it is queued in the store); before the pool and the store close."""
        later = list(self._later)
        for task in later:
            task.cancel()
        await asyncio.gather(*later, return_exceptions=True)

    async def _submit_after(self, delay_s: float, task_id: int, turn_id: int) -> None:
        await asyncio.sleep(delay_s)
        try:
            await self._queue.release(task_id, turn_id)
        finally:
            self._later.discard(asyncio.current_task())  # type: ignore[arg-type]

    @contextlib.asynccontextmanager
    async def _reading_ahead(self) -> AsyncIterator[Callable[[int, str], None]]:
        """Begins a claimed first turn's baseline (``Openings``) as soon as its directory is
        known, while its task commits; dropped when the creation fails (its commit too)."""
        started: list[int] = []

        def read_ahead(turn_id: int, cwd: str) -> None:
            self._openings.start(turn_id, cwd)
            started.append(turn_id)

        try:
            yield read_ahead
        except BaseException:
            for turn_id in started:
                self._openings.drop(turn_id)
            raise

    async def _own_worktree(self, task: Task, cwd: Path, head: RepoHead) -> Task:
        """Move a just-created task into its own worktree; a failure undoes the task (the
        caller's transaction rolls back) and the user is told why."""
        created = await self._worktrees.create(task.id, task.slug, cwd, head)
        return await self._store.tasks.set_cwd(task.id, str(created.cwd))
