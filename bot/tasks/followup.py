"""One follow-up, whichever door it came through (a reply, a voice draft's Start, the board or
its Mini App, an MCP client): the task's next turn in the same agent session. While a turn of
the task runs it may go into that turn instead: the door's choice (the board's Steer now /
Queue, MCP's ``steer``), else offered on its acknowledgement like a reply's, which
DETACH_REPLY_DEFAULT decides untapped. Its acknowledgement says where it came from and where it
is, and follows its turn to the end; its words enter the transcript where they reach the agent
(``bot.turns.transcript``: steered in, or as its own turn)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from bot.errors import TaskNotFound
from bot.models import FollowUpDoor, MessageKind, Task, TaskStatus, Turn
from bot.money.desk import MoneyDesk
from bot.store import Store
from bot.tasks.nextturn import NextTurns
from bot.tasks.steering import SteerAnswer
from bot.telegram.attachments import mention, place
from bot.telegram.callbacks import SteerChoice
from bot.telegram.notifier import Notifier

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class FollowUp:
    """What a door asks: ``reply_to``, the message it answers (chat, voice), is linked to the
    task and answered; ``steer``: the door's choice should a turn run (None: offered)."""

    user_id: int
    task_id: int
    prompt: str
    door: FollowUpDoor = FollowUpDoor.CHAT
    reply_to: int | None = None
    attachments: Sequence[Path] = ()
    steer: bool | None = None
    client: str = ""  # an MCP client's name


@dataclass(frozen=True, slots=True)
class FollowedUp:
    """``behind``: a turn of the task ran when it came; ``steer``: what the door's choice came
    to (None: no turn ran, or Steer now / Queue is offered)."""

    task: Task
    turn: Turn
    behind: bool
    steer: SteerAnswer | None = None


class Steering(Protocol):
    """Steer now / Queue: ``bot.tasks.steering.SteerDesk`` in the bot, ``SteerRequests``
    where no turn runs."""

    def may_steer(self, task: Task) -> bool: ...

    def offered(self, owner_id: int, turn_id: int) -> None: ...

    async def choose(self, user_id: int, turn_id: int, choice: SteerChoice) -> SteerAnswer: ...


class FollowUps:
    def __init__(
        self,
        *,
        store: Store,
        turns: NextTurns,
        notifier: Notifier,
        money: MoneyDesk | None,
        validate: Callable[[str, str], str],
        steering: Steering | None,
        running: Callable[[int], bool] = lambda _task_id: False,
        reopen: Callable[[int], Awaitable[object]] | None = None,
    ) -> None:
        """``money``: the daily cap (None: a process without the presets, `detach mcp`);
        ``validate``: a prompt's check (``TaskPlanner.validate_prompt``); ``steering``: None
        where follow-ups only queue; ``running``: whether this process runs the task's turn;
        ``reopen``: cuts a merged or discarded worktree again (``Worktrees.reopen``), to hold
        the files a follow-up brings."""
        self._store = store
        self._turns = turns
        self._notifier = notifier
        self._money = money
        self._validate = validate
        self._steering = steering
        self._running = running
        self._reopen = reopen

    async def follow_up(self, asked: FollowUp) -> FollowedUp | None:
        """The task's next turn; None when ``reply_to`` continued the task already (Telegram
        delivered it twice). Refused while the task is held at the terminal (its words are
        kept for "Take back and send it"; files are not: they stay in the chat)."""
        task = await self._own(asked.user_id, asked.task_id)
        park = None if asked.attachments else asked.reply_to
        await self._turns.refuse_held(task, None if park is None else (park, asked.prompt))
        prompt = self._validate(asked.prompt + mention(list(asked.attachments)), "detach")
        if self._money is not None:
            await self._money.check_daily_cap(asked.user_id)
        if asked.reply_to is not None and await self._linked(task, asked.reply_to):
            return None
        behind = self._running(task.id) or task.status is TaskStatus.RUNNING
        steering = self._steering if behind else None
        steerable = steering is not None and steering.may_steer(task)
        offer = steerable and asked.steer is None
        if asked.attachments and self._reopen is not None:
            await self._reopen(task.id)  # a merged or discarded worktree is cut again for them
        place(list(asked.attachments), Path(task.cwd))

        async def link_and_say(turn: Turn) -> None:
            if asked.reply_to is not None:
                await self._store.links.link(
                    task.chat_id, asked.reply_to, task.id, MessageKind.FOLLOW_UP
                )
            await self._notifier.followup_queued(
                task, turn.id, behind=behind, offer=offer, reply_to=asked.reply_to,
                door=asked.door, client=asked.client,
            )  # fmt: skip

        turn = await self._turns.queue(
            task, asked.user_id, prompt, "follow_up", link_and_say, detail=self._detail(asked)
        )
        answer = await self._steer(asked, turn, steering if steerable else None, offer)
        log.info("task %s: follow-up turn %s from %s (%s)", task.id, turn.id, asked.door, answer)
        return FollowedUp(task, turn, behind, answer)

    async def _steer(
        self, asked: FollowUp, turn: Turn, steering: Steering | None, offer: bool
    ) -> SteerAnswer | None:
        """Steer now / Queue offered (its timer started), or the door's choice made."""
        if steering is None:
            return None
        if offer:
            steering.offered(asked.user_id, turn.id)
            return None
        choice = SteerChoice.STEER if asked.steer else SteerChoice.QUEUE
        return await steering.choose(asked.user_id, turn.id, choice)

    async def _own(self, user_id: int, task_id: int) -> Task:
        task = await self._store.tasks.get(task_id)
        if task is None or task.owner_id != user_id:
            raise TaskNotFound(f"#{task_id}")
        return task

    async def _linked(self, task: Task, reply_to: int) -> bool:
        if await self._store.links.task_for(task.chat_id, reply_to) is None:
            return False
        log.info("message %s already continued task %s", reply_to, task.id)
        return True

    @staticmethod
    def _detail(asked: FollowUp) -> str:
        """The audit's word on where it came from: the door, and an MCP client's name."""
        if asked.door is FollowUpDoor.MCP:
            return f"mcp:{asked.client}"
        return "" if asked.door is FollowUpDoor.CHAT else str(asked.door)
