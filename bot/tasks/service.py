"""Task service: what a user (through Telegram or the shell) can do with tasks, authorised. The
one face handlers see: creating a task is ``bot.tasks.creation``'s, finding one
``bot.tasks.lookup``'s, cancelling and archiving ``bot.tasks.lifecycle``'s; here are a task's
next turns (follow-ups and the turns other services queue) and the user's chat settings."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from bot.errors import TaskHeld, TaskStateError, UserInputError
from bot.fleet.takeover import Takeover
from bot.models import (
    Engine,
    MessageKind,
    NewTask,
    NotifyPolicy,
    Preset,
    Task,
    TaskStatus,
    Turn,
)
from bot.preflight.gate import PreflightGate
from bot.store import Store
from bot.tasks.creation import TaskCreator
from bot.tasks.lifecycle import TaskLifecycle
from bot.tasks.lookup import TaskLookup
from bot.tasks.planning import TaskPlanner
from bot.tasks.preflighting import PreflightStep
from bot.tasks.requests import ChatRequest, TaskRequests
from bot.tasks.routing import TaskRouter
from bot.tasks.steering import SteerDesk
from bot.telegram.attachments import mention, place
from bot.telegram.held import HeldFiles
from bot.telegram.notifier import Notifier
from bot.telegram.terminal import hold_stamp
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
        self.preflight = PreflightStep(preflight, self, router) if preflight is not None else None
        self.requests = TaskRequests(self, self.preflight)
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

    async def start_from_chat(self, request: ChatRequest) -> Task:
        """The task of ``request``, started now: a walk-away task gets its preflight first
        (when on), whose verdict its acknowledgement shows, but is never held."""
        task = await self.requests.from_chat(request, may_hold=False)
        assert task is not None  # not held: may_hold=False
        return task

    async def request_from_chat(self, request: ChatRequest) -> Task | None:
        """As ``start_from_chat``, but a walk-away task whose preflight asks a question or
        refuses is held (None) until its owner answers (``TaskRequests.from_chat``)."""
        return await self.requests.from_chat(request)

    async def start_walk_away(self, new: NewTask, options: dict[str, str]) -> Task:
        """``start`` for a task file or a schedule's run, through its preflight (when on)."""
        return await self.requests.walk_away(new, options)

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
        task = await self.get_own(user_id, task_id)
        # at the terminal: nothing is linked, placed or run; words alone are kept for "Take back
        # and send it" (files are not: they stay in the chat, to be sent again)
        await self.refuse_held(task, None if attachments else (reply_to, prompt))
        prompt = self.validate_prompt(prompt + mention(list(attachments)), "detach")
        await self.money.check_daily_cap(user_id)
        if await self._store.links.task_for(task.chat_id, reply_to) is not None:
            log.info("message %s already continued task %s", reply_to, task.id)
            return None
        running = self._pool.is_running(task.id) or task.status is TaskStatus.RUNNING
        steer = running and self.steering is not None and self.steering.may_steer(task)
        if attachments:  # a merged or discarded worktree is cut again to hold them
            await self.worktrees.reopen(task.id)
        place(list(attachments), Path(task.cwd))

        async def link_and_say(turn: Turn) -> None:
            await self._store.links.link(task.chat_id, reply_to, task.id, MessageKind.FOLLOW_UP)
            await self._notifier.followup_queued(task, running, reply_to, turn.id, steer)

        turn = await self.queue_turn(task, user_id, prompt, "follow_up", link_and_say)
        if steer and self.steering is not None:
            self.steering.offered(user_id, turn.id)
        return turn

    async def queue_turn(
        self,
        task: Task,
        user_id: int,
        prompt: str,
        action: str,
        notify: Callable[[Turn], Awaitable[None]],
        before: Callable[[], Awaitable[None]] | None = None,
    ) -> Turn:
        """The next turn of ``task`` (a follow-up, a resume, a retry, a budget extension):
        the turn, its audit line and what ``notify`` tells the user of it commit together;
        then the turn is submitted. Refused (``TaskHeld``) while the task is at the terminal.
        ``before``: what the turn is conditional on, in the same transaction (what it raises
        undoes it all)."""
        async with self._store.atomic():
            await self.refuse_held(task)
            if before is not None:
                await before()
            turn = await self._store.tasks.add_turn(task.id, prompt)
            await self._store.audit.record(action, user_id, task.id)
            await notify(turn)
            now = await self.get_own(user_id, task.id)
            await self._notifier.ack_status(now)
            await self._notifier.buttons_follow(now)
        await self._queue.kick(task.id)
        return turn

    async def refuse_held(self, task: Task, park: tuple[int, str] | None = None) -> None:
        """``TaskHeld`` when ``task`` is held at the terminal (since when, in its owner's
        zone): phone and terminal never write the same session at once. ``park``: the refused
        reply (message id, text), kept for "Take back and send it"."""
        held = await self._store.terminal.get(task.id)
        if held is None:
            return
        since = local_time(held.since, await self.zone(task.owner_id))
        parked = park is not None and await self._store.terminal.park(task.id, *park)
        parked_id = park[0] if park and parked else None
        raise TaskHeld(task.id, task.label, since, parked_id, hold_stamp(held.since))

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
            raise TaskStateError(
                "tasks.no_result",
                label=task.label,
                status=self._texts.status(task.locale, task.status),
            )
        work = await self.worktrees.offers(task.id)
        await self._notifier.turn_finished(task, turn, worktree_work=work)

    async def cancel(self, user_id: int, task_id: int, reply_to: int | None = None) -> Task:
        """``TaskLifecycle.cancel``: its queued turns dropped, its running one stopped."""
        return await self.lifecycle.cancel(user_id, task_id, reply_to)

    async def archive(self, user_id: int, ref: str) -> int:
        """``TaskLifecycle.archive``: one idle task, or ``all`` finished ones."""
        one = None if ref == "all" else parse_task_id(ref, "archive")
        return await self.lifecycle.archive(user_id, ref, one)

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
