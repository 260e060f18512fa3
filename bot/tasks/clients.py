"""What a client of `detach mcp` may do with tasks: its owner's (under ``--parent``: only that
task's sub-tasks), read, cancelled, continued through the one follow-up use case as a process
that runs no turn has it (the bot submits the turn and steers it), and a sub-task's budget.
A task outside that scope is reported as missing; refusals are ``ToolRefused``, in English for
the calling model."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from bot.errors import ConfigError, ToolRefused
from bot.models import Task, TaskStatus, Turn
from bot.store import Store, TranscriptLine
from bot.store.prs import PrRow
from bot.tasks.lineage import spent_below

if TYPE_CHECKING:  # aiogram's types load on the first follow-up or cancel, not at start
    from bot.money.desk import MoneyDesk
    from bot.tasks.cancel import Cancellation, Cancelled
    from bot.tasks.family import TaskFamily
    from bot.tasks.followup import FollowedUp, FollowUp, FollowUps
    from bot.tasks.owner_ask import AskRules
    from bot.telegram.notifier import Notifier

MAX_ID = 2**53  # a client's number beyond this names no task (and no SQLite integer)
NOTE_CHARS = 500  # an agent's note: one short text
NOTED = "Notified"  # its transcript event (``bot.turns.transcript``, ``bot.turns.items``)


@dataclass(frozen=True, slots=True)
class NoteRules:
    """How often an agent may ``notify`` (DETACH_NOTIFY_GAP_S, DETACH_NOTIFY_MAX)."""

    gap_s: float = 30.0
    most: int = 10


@dataclass(frozen=True, slots=True)
class TurnPool:
    """How many turns run at once (DETACH_MAX_CONCURRENT_TURNS), and how long a waited-for
    sub-task may stay queued while all of them run before ``wait`` says it starves."""

    max_turns: int = 2
    starved_after_s: float = 20.0


class ClientTasks:
    def __init__(
        self,
        store: Store,
        *,
        owner: int,
        parent: Task | None = None,
        money: MoneyDesk | None = None,
        limits: tuple[int, int] = (5, 4000),
        timezone: str = "UTC",
        notes: NoteRules = NoteRules(),
        pool: TurnPool = TurnPool(),
        asks: AskRules | None = None,
    ) -> None:
        """``money``: the daily cap a follow-up keeps (None: none checked); ``limits``: the
        sub-tasks one task may start (DETACH_MAX_SUBTASKS) and a prompt's characters;
        ``timezone``: for owners who set no /tz; ``asks``: how ``ask_owner`` waits."""
        self._store = store
        self.owner = owner
        self.parent = parent
        self._money = money
        self._max_subtasks, self._max_chars = limits
        self._timezone = timezone
        self._notes = notes
        self._pool = pool
        self._asks = asks
        self._notifier: Notifier | None = None

    async def scoped_to(self, parent_id: int) -> ClientTasks:
        """These under ``--parent``: the sub-tasks of ``parent_id``, its owner's; ConfigError
        when it neither may start sub-tasks nor is one (``bot.tasks.lineage``)."""
        parent = await self._store.tasks.get(parent_id)
        if parent is None or not (parent.subtasks or parent.parent_id is not None):
            raise ConfigError(f"task #{parent_id} may not start sub-tasks")
        limits = (self._max_subtasks, self._max_chars)
        return ClientTasks(
            self._store,
            owner=parent.owner_id,
            parent=parent,
            money=self._money,
            limits=limits,
            timezone=self._timezone,
            notes=self._notes,
            pool=self._pool,
            asks=self._asks,
        )

    async def for_task(self, task_id: int) -> ClientTasks:
        """These under ``--task``: the owner tools of ``task_id``'s agent (``notify``,
        ``ask_owner``), none over other tasks; ConfigError when there is no such task."""
        task = await self._store.tasks.get(task_id)
        if task is None:
            raise ConfigError(f"no task #{task_id}")
        return ClientTasks(
            self._store,
            owner=task.owner_id,
            parent=task,
            timezone=self._timezone,
            notes=self._notes,
            asks=self._asks,
            pool=self._pool,
        )

    async def own(self, task_id: int) -> Task:
        """The task, in scope; else refused as missing."""
        task = await self._store.tasks.get(task_id) if 0 < task_id < MAX_ID else None
        parent = self.parent
        if (
            task is None
            or task.owner_id != self.owner
            or (parent is not None and task.parent_id != parent.id)
        ):
            raise ToolRefused(f"no task #{task_id} (see list)")
        return task

    async def turns(self, task: Task) -> list[Turn]:
        return await self._store.tasks.turns_of(task.id)

    async def last_turn(self, task: Task) -> Turn | None:
        return await self._store.tasks.last_turn(task.id)

    async def ran(self, tasks: Sequence[Task]) -> dict[int, str]:
        """By task: the model its newest turn ran, as its engine named it (one read for all;
        a task none named is not in it), as the board reads it."""
        return await self._store.ran.models([t.id for t in tasks])

    async def asks_approval(self, task: Task) -> bool:
        return await self._store.questions.pending_count(task.id) > 0

    async def pr(self, task: Task) -> PrRow | None:
        """The task's pull request as its card follows it; None when its owner opened none."""
        return await self._store.prs.get(task.id)

    async def events(self, task_id: int, cursor: int, limit: int) -> list[TranscriptLine]:
        """The transcript's events after ``cursor`` (at most ``limit``)."""
        return await self._store.transcript.after(task_id, cursor, limit)

    async def listed(self, active_only: bool, limit: int) -> list[Task]:
        """The newest ``limit`` tasks in scope (``active_only``: queued or running)."""
        statuses = [s for s in TaskStatus if s.active] if active_only else None
        if self.parent is not None:
            children = await self._store.tasks.children(self.parent.id)
            return [t for t in children if statuses is None or t.status in statuses][-limit:]
        return await self._store.tasks.list_for(self.owner, statuses, limit)

    async def follow_up(self, asked: FollowUp) -> FollowedUp:
        """``asked`` (its task in scope), refused while the task is archived or held at the
        terminal; raises ``UserInputError`` as the chat's follow-up does (the daily cap)."""
        task = await self.own(asked.task_id)
        if task.status is TaskStatus.ARCHIVED:
            raise ToolRefused(f"{task.label} is archived")
        if await self._store.terminal.get(task.id) is not None:
            raise ToolRefused(f"{task.label} is held at the terminal; its owner takes it back")
        done = await self._follow_ups().follow_up(asked)
        assert done is not None  # it answers no message: never a repeat
        return done

    async def cancel(self, task_id: int, client: str) -> Cancelled:
        """The task cancelled as from the chat (``Cancellation``), the client in its audit
        line; raises ``UserInputError`` as the chat's /cancel does (not running or queued)."""
        task = await self.own(task_id)
        return await self._cancellation().cancel(task.owner_id, task.id, detail=client)

    async def subtask_budget(self) -> str | None:
        """A new sub-task's budget: what is left of the parent's (its own spend and its other
        sub-tasks'); refused when none is left or it started the most it may."""
        parent = self.parent
        assert parent is not None
        if not parent.subtasks:  # a sub-task at the deepest level: its server is for talk
            raise ToolRefused(
                f"{parent.label} is a sub-task at the deepest level (DETACH_SUBTASK_DEPTH): it "
                "may not start sub-tasks. Nothing was started: do the work yourself"
            )
        children = await self._store.tasks.children(parent.id)
        if len(children) >= self._max_subtasks:
            raise ToolRefused(
                f"this task has started {len(children)} sub-tasks, the most it may "
                "(DETACH_MAX_SUBTASKS); finish the work yourself"
            )
        now = await self._store.tasks.get(parent.id)
        if now is None or now.max_usd is None:
            return None
        left = now.max_usd - now.total_cost_usd - await spent_below(self._store, parent.id)
        if left <= 0.001:
            raise ToolRefused("this task's budget is spent: no sub-task can start")
        return f"{left:.4f}"

    async def notify(self, text: str, urgent: bool) -> dict[str, Any]:
        """A note of the parent's agent to its owner, in the task's thread and transcript:
        silent unless ``urgent`` (``Notifier.agent_note``: the two-buzz rule); refused (the
        reason for the model) when empty, too long, too soon after the last or beyond the
        most a task may send. The text is the agent's: escaped in the chat, redacted by the
        store and the outbox."""
        parent = self.parent
        if parent is None:
            raise ToolRefused("notify is for the agent of a task; this server serves none")
        text = text.replace("\x00", "").strip()
        if not text:
            raise ToolRefused("the note is empty")
        if len(text) > NOTE_CHARS:
            raise ToolRefused(
                f"the note has {len(text)} characters; at most {NOTE_CHARS}: say it shortly"
            )
        last = await self._store.transcript.last_of(parent.id, NOTED)
        sent = int(last.body.get("n", 0)) if last is not None else 0
        if sent >= self._notes.most:
            raise ToolRefused(
                f"this task has sent {sent} notes, the most it may (DETACH_NOTIFY_MAX); "
                "put the rest in your answer"
            )
        if last is not None and last.created_at is not None:
            waited = (datetime.now(UTC) - last.created_at).total_seconds()
            if waited < self._notes.gap_s:
                raise ToolRefused(
                    f"the last note went {waited:.0f} s ago; at most one per "
                    f"{self._notes.gap_s:.0f} s (DETACH_NOTIFY_GAP_S): nothing was sent, "
                    "send it later or put it in your answer"
                )
        task = await self._store.tasks.get(parent.id)
        turn = await self._store.tasks.last_turn(parent.id)
        if task is None or turn is None or not task.status.active:
            raise ToolRefused(f"{parent.label} runs no turn: nothing was sent")
        loud = await self.notifier().agent_note(task, text, urgent)
        body = {"text": text, "urgent": urgent, "n": sent + 1, "buzzed": loud}
        await self._store.transcript.append(task.id, turn.id, [(NOTED, body)])
        left = self._notes.most - sent - 1
        return {"sent": True, "buzzed": loud, "notes_left": left}

    # -- the sub-task tree (issue #55) ---------------------------------------------------------
    def family(self) -> TaskFamily:
        """What the parent's agent may say to its own parent and siblings; refused outside
        ``--parent``."""
        from bot.tasks.family import TaskFamily

        if self.parent is None:
            raise ToolRefused("this server serves no task: there is no tree to talk in")
        return TaskFamily(self._store, self.parent)

    async def settled(
        self, task_id: int, timeout_s: float, poll_s: float = 0.5
    ) -> tuple[Task, bool]:
        """The task (in scope) once no longer queued or running, or as it is after
        ``timeout_s``; and whether the wait ended early because it starves: queued for
        ``TurnPool.starved_after_s`` while every turn slot runs (waiting ancestors hold them)."""
        began = time.monotonic()
        deadline = began + timeout_s
        task = await self.own(task_id)
        while task.status.active and time.monotonic() < deadline:
            if task.status is TaskStatus.QUEUED and await self._starves(began):
                return task, True
            await asyncio.sleep(min(poll_s, max(deadline - time.monotonic(), 0)))
            task = await self.own(task_id)
        return task, False

    async def _starves(self, began: float) -> bool:
        if time.monotonic() - began < self._pool.starved_after_s:
            return False
        running = await self._store.tasks.list_for(self.owner, [TaskStatus.RUNNING], 64)
        return len(running) >= self._pool.max_turns

    async def ask_owner(self, question: str, answers: Sequence[str]) -> dict[str, Any]:
        """The parent's agent asks its owner (``bot.tasks.owner_ask``); the call waits for a
        tap or DETACH_PREFLIGHT_WAIT_S."""
        parent = self.parent
        if parent is None:
            raise ToolRefused("ask_owner is for the agent of a task; this server serves none")
        from bot.tasks.owner_ask import AskRules, OwnerQuestions

        task = await self._store.tasks.get(parent.id)
        assert task is not None
        rules = self._asks or AskRules()
        return await OwnerQuestions(self._store, self.notifier(), rules).ask(
            task, question, answers
        )

    def notifier(self) -> Notifier:
        """What tells the owner's chat (its outbox rows are the bot's to deliver); built on
        first use, so aiogram's types load then, not when the server starts."""
        if self._notifier is None:
            from bot.telegram.notifier import Notifier
            from bot.telegram.outbox import Outbox
            from bot.telegram.texts import Texts

            self._notifier = Notifier(self._store, Texts(), Outbox(self._store))
        return self._notifier

    def _cancellation(self) -> Cancellation:
        from bot.tasks.cancel import Cancellation
        from bot.tasks.lookup import TaskLookup

        notifier = self.notifier()
        return Cancellation(
            lookup=TaskLookup(self._store, notifier.texts),
            store=self._store,
            notifier=notifier,
            texts=notifier.texts,
        )

    def _follow_ups(self) -> FollowUps:
        from bot.tasks.followup import FollowUps
        from bot.tasks.nextturn import NextTurns
        from bot.tasks.planning import valid_prompt
        from bot.tasks.steering import SteerRequests

        notifier = self.notifier()
        return FollowUps(
            store=self._store,
            turns=NextTurns(self._store, notifier, None, self._timezone),
            notifier=notifier,
            money=self._money,
            validate=functools.partial(valid_prompt, max_chars=self._max_chars),
            steering=SteerRequests(self._store, notifier),
        )
