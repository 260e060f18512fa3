"""Task service: what a user (through Telegram or the shell) can do with tasks, authorised. The
one face handlers see: creating a task is ``bot.tasks.creation``'s, finding one
``bot.tasks.lookup``'s, cancelling and archiving ``bot.tasks.lifecycle``'s, a task's next turn
``bot.tasks.nextturn``'s and a follow-up from any door ``bot.tasks.followup``'s; here are the
user's chat settings."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from bot.errors import UserInputError
from bot.fleet.takeover import Takeover
from bot.models import (
    Engine,
    MessageKind,
    NewTask,
    NotifyPolicy,
    Preset,
    Task,
    Turn,
)
from bot.preflight.gate import PreflightGate
from bot.store import Store, TaskFileRow
from bot.store.preflights import PreflightHold
from bot.tasks.creation import TaskCreator
from bot.tasks.followup import FollowUp, FollowUps
from bot.tasks.lifecycle import TaskLifecycle
from bot.tasks.lookup import TaskLookup
from bot.tasks.nextturn import NextTurns
from bot.tasks.planning import TaskPlanner
from bot.tasks.preflighting import PreflightStep
from bot.tasks.requests import ChatRequest, TaskRequests
from bot.tasks.routing import TaskRouter
from bot.tasks.steering import SteerDesk
from bot.tasks.unanswered import no_answer_yet
from bot.telegram.held import HeldFiles
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts
from bot.turns.outcome import local_time
from bot.turns.pool import JobPool
from bot.turns.queue import TurnQueue

log = logging.getLogger(__name__)


class TaskService:
    def __init__(
        self,
        *,
        store: Store,
        pool: JobPool,
        queue: TurnQueue,
        notifier: Notifier,
        texts: Texts,
        planner: TaskPlanner,
        takeover: Takeover | None = None,
        preflight: PreflightGate | None = None,
        steering: SteerDesk | None = None,
    ) -> None:
        """``planner`` resolves new tasks, and holds the engines tasks may use, the money desk,
        the working directories and worktrees; ``takeover``: on a shared database, takes over
        the turns of a runner found gone; ``preflight``: a cheap look at a walk-away task
        before it starts (None: no preflight model here)."""
        self.steering = steering  # a follow-up while a turn runs: Steer now / Queue
        router = TaskRouter(queue, planner.defaults)
        kept = planner.defaults.attachments_staging.parent / "preflight"  # held tasks' files
        self.preflight = (
            PreflightStep(preflight, self, router, store, kept) if preflight is not None else None
        )
        self.requests = TaskRequests(self, self.preflight, store)
        self._store = store
        self._pool = pool
        self._queue = queue
        self._notifier = notifier
        self._texts = texts
        self.planner = planner
        self._engines = planner.engines
        self._defaults = defaults = planner.defaults
        self.workdirs = planner.workdirs
        self.money = planner.money
        self.worktrees = planner.worktrees
        self.default_engine = defaults.engine
        self.plain_text_tasks = defaults.plain_text_tasks
        self.max_attachment_bytes = defaults.max_attachment_bytes
        self.attachments_staging = defaults.attachments_staging
        self.held = HeldFiles(defaults.attachments_staging.parent / "held")
        creator = TaskCreator(
            store=store,
            queue=queue,
            notifier=notifier,
            money=planner.money,
            worktrees=planner.worktrees,
            engines=planner.engines,
        )
        self.start = creator.start  # a new task: created, acknowledged, its first turn queued
        self.aclose = creator.aclose  # routed first turns' grace timers stop
        lookup = TaskLookup(store, texts)  # somebody else's task is reported as missing
        self.get_own = lookup.get_own
        self.get_idle = lookup.get_idle
        self.task_linked = lookup.task_linked
        self.task_for_message = lookup.task_for_message
        self.task_in_topic = lookup.task_in_topic
        self.list = lookup.list
        self.archived_count = lookup.archived_count
        self.next_turns = turns = NextTurns(store, notifier, queue.kick, defaults.timezone)
        self.queue_turn = turns.queue  # a task's next turn, and what tells of it
        self.refuse_held = turns.refuse_held  # refused while the task is at the terminal
        # one follow-up from every door: Steer now / Queue while a turn runs
        self.followups = FollowUps(
            store=store,
            turns=turns,
            notifier=notifier,
            money=planner.money,
            validate=planner.validate_prompt,
            steering=steering,
            running=pool.is_running,
            reopen=planner.worktrees.reopen,
        )
        self.lifecycle = TaskLifecycle(
            self, store=store, pool=pool, notifier=notifier, texts=texts, takeover=takeover
        )
        self.plan = planner.plan
        self.validate_prompt = planner.validate_prompt
        self.current_dir = planner.current_dir

    @property
    def available_engines(self) -> tuple[Engine, ...]:
        """The engines that passed their start-up probe here."""
        return tuple(self._engines)

    @property
    def texts(self) -> Texts:
        return self._texts

    async def request_from_chat(self, request: ChatRequest) -> Task | None:
        """The task of ``request``; None: its preflight holds it until its owner answers
        (``TaskRequests.from_chat``)."""
        admitted = await self.requests.from_chat(request)
        return admitted if isinstance(admitted, Task) else None

    async def start_walk_away(
        self, new: NewTask, options: dict[str, str], file: TaskFileRow | None = None
    ) -> Task | PreflightHold:
        """A task file's (``file``) or a schedule's run's task, or its preflight's hold
        (``TaskRequests.walk_away``)."""
        return await self.requests.walk_away(new, options, file)

    async def reroute(self, task: Task, engine: Engine, preset: Preset | None) -> Task | None:
        """``task``, none of whose turns started, on ``engine`` (``preset``); None: too late."""
        moved = await self._store.tasks.reroute(
            task.id, engine, preset.name if preset else None, preset.model if preset else None
        )
        if moved is not None:
            await self._store.audit.record("rerouted", task.owner_id, task.id, engine)
            log.info("task %s: moved back to %s before it started", task.id, engine)
        return moved

    async def zone(self, user_id: int) -> str:
        """The user's time zone (/tz), else the machine's."""
        return await self._store.users.tz(user_id) or self._defaults.timezone

    async def engine_limits(self, user_id: int) -> list[tuple[Engine, str]]:
        """Engines whose usage limit is reached now, and when it resets in the user's zone."""
        zone = await self.zone(user_id)
        limited = []
        for engine in sorted(self._engines):
            until = await self._queue.limited_until(engine)
            if until is not None:
                limited.append((engine, local_time(until, zone)))
        return limited

    async def notify_policy(self, chat_id: int) -> NotifyPolicy:
        return await self._notifier.policies.get(chat_id)

    async def set_notify_policy(self, chat_id: int, typed: str) -> NotifyPolicy:
        """``/notify all|done|quiet``: which task messages of this chat make the phone buzz."""
        try:
            policy = NotifyPolicy(typed.strip().lower())
        except ValueError:
            raise UserInputError("error.bad_notify", value=typed.strip()) from None
        await self._notifier.policies.set(chat_id, policy)
        return policy

    async def change_dir(self, chat_id: int, typed: str) -> Path:
        path = self.workdirs.resolve(typed, await self.current_dir(chat_id))
        await self._store.chats.set_cwd(chat_id, str(path))
        return path

    async def follow_up(
        self,
        user_id: int,
        task_id: int,
        prompt: str,
        reply_to: int,
        attachments: Sequence[Path] = (),
    ) -> Turn | None:
        """A reply (or a message in the task's topic) continues the task (``FollowUps``)."""
        asked = FollowUp(
            user_id=user_id,
            task_id=task_id,
            prompt=prompt,
            reply_to=reply_to,
            attachments=attachments,
        )
        done = await self.followups.follow_up(asked)
        return done.turn if done is not None else None

    async def say(self, task: Task, key: str) -> None:
        """A status line about ``task`` (``key`` takes the task's label)."""
        await self._notifier.send(
            task, self._texts.get(task.locale, key, label=task.label), kind=MessageKind.STATUS
        )

    async def show_result(self, user_id: int, task_id: int) -> None:
        """Send the last answer of a task again (as the completion card), or say there is none."""
        task = await self.get_own(user_id, task_id)
        turn = await self._store.tasks.last_turn(task.id)
        if turn is None or turn.status.active:
            raise await no_answer_yet(self._store, self._texts, task, turn)
        work = await self.worktrees.offers(task.id)
        await self._notifier.turn_finished(task, turn, worktree_work=work)

    async def cancel(self, user_id: int, task_id: int, reply_to: int | None = None) -> Task:
        """``TaskLifecycle.cancel``: its queued turns dropped, its running one stopped."""
        return await self.lifecycle.cancel(user_id, task_id, reply_to)

    async def archive(
        self, user_id: int, ref: str, announce: Callable[[int], Awaitable[object]] | None = None
    ) -> int:
        """``TaskLifecycle.archive``: one idle task, or ``all`` finished ones; ``announce``:
        the answer, given the count, before the cards are edited."""
        one = None if ref == "all" else parse_task_id(ref, "archive")
        return await self.lifecycle.archive(user_id, ref, one, announce)

    async def resume_interrupted(self, user_id: int, task_id: int) -> Task:
        return await self.lifecycle.resume_interrupted(user_id, task_id)

    async def mark_failed(self, user_id: int, task_id: int) -> Task:
        return await self.lifecycle.mark_failed(user_id, task_id)


def parse_task_id(ref: str, command: str) -> int:
    """``12`` or ``#12`` -> 12; anything else is a clear error naming the command."""
    text = ref.strip().lstrip("#")
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise UserInputError("error.bad_task_id", command=command)
    return int(text)
