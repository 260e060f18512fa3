"""The stall watchdog of a running turn: no event from its agent for ``after_s`` and the owner
gets ONE message naming what the turn is at — a tool at work for N minutes (which command),
the model silent, or the agent's answer in while its process has not exited — with Stop and
Keep waiting. Never for a turn that waits on its owner (an approval, a question), never twice
for the same state in one turn, and never again once the owner chose Keep waiting (in any
process: the answer is in the store, read before each message). Silent (no buzz): it tells,
it does not summon; the card that ends the turn is its buzz."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from enum import StrEnum

from bot.approvals.stalls import close_notice, stall_keyboard
from bot.events import AgentEvent, ToolCalled, ToolFinished, TurnFinished
from bot.models import MessageKind, Task
from bot.store import Store
from bot.store.stalls import StallNotice, StallNoticeState
from bot.telegram.notifier import Notifier
from bot.telegram.render import shorten
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)
ASK_OWNER = frozenset({"mcp__detach__ask_owner", "ask_owner"})  # Claude's and Codex's; /local's
COMMAND_CHARS = 200  # the command a stalled tool runs, as much as the message shows


class StallState(StrEnum):
    """What a quiet turn is at."""

    OWNER = "owner"  # waits for its owner's answer: never a message
    TOOL = "tool"  # a tool the agent called has not returned
    MODEL = "model"  # nothing pending: the model has not answered
    EXITING = "exiting"  # the agent's answer is in; its process has not exited


class StallWatch:
    def __init__(
        self,
        *,
        notifier: Notifier,
        store: Store,
        task: Task,
        turn_id: int,
        after_s: float,
        asking: Callable[[], bool],
    ) -> None:
        """``asking``: whether the turn waits on its owner now (the approval desk knows).
        What it said, and a Keep waiting tapped in any process, are in ``store.stalls``."""
        self._notifier = notifier
        self._store = store
        self._task = task
        self._turn_id = turn_id
        self._after_s = after_s
        self._desk_asks = asking
        self._owner_asks: set[str] = set()  # the agent's open ask_owner calls
        self._last = time.monotonic()
        self._tools: dict[str, tuple[str, float]] = {}  # open tool calls: (what, since)
        self._answered = False  # the verdict came; the clock restarts when the agent exits
        self._paused = False
        self._told: set[StallState] = set()
        self._silenced = False  # the owner chose Keep waiting (as the store said when it spoke)
        self._row_id: int | None = None  # the outbox row of the last message sent here
        self._watch: asyncio.Task[None] | None = None

    def observe(self, event: AgentEvent) -> None:
        """Every event from the agent restarts the clock."""
        self._last = time.monotonic()
        if isinstance(event, ToolCalled):
            self._tools[event.tool_use_id] = (f"{event.name}: {event.summary}", self._last)
            if event.name in ASK_OWNER:
                self._owner_asks.add(event.tool_use_id)
        elif isinstance(event, ToolFinished):
            self._tools.pop(event.tool_use_id, None)
            self._owner_asks.discard(event.tool_use_id)
        elif isinstance(event, TurnFinished):
            self._answered, self._paused = True, True  # its card and check come first

    def start(self) -> None:
        self._watch = asyncio.create_task(self._run())

    def exiting(self) -> None:
        """The turn is reported; from now on only its agent's exit is awaited."""
        self._last, self._paused = time.monotonic(), False

    async def close(self) -> None:
        """The turn is over: the watch stops, and its message, if it spoke, loses its buttons
        and says the turn went on to its end (no word that is false afterwards). A message
        its owner answered with Keep waiting, in whichever process, was edited by that answer.
        Only the message this watch sent: one a newer runner of the turn sent (this process
        lost the turn) is that runner's to close."""
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.wait({self._watch})  # a cancel of the turn itself is not swallowed
            if not self._watch.cancelled() and self._watch.exception() is not None:
                log.error(  # a watchdog that failed does not fail its turn
                    "task %s turn %s: the stall watchdog failed: %r",
                    self._task.id,
                    self._turn_id,
                    self._watch.exception(),
                )
        if self._row_id is None:  # it never spoke: a message there is another run's
            return
        notice = await self._store.stalls.end(self._turn_id, self._row_id)
        if notice is not None:
            await close_notice(self._notifier, self._task, notice)

    def _asking(self) -> bool:
        """The turn waits on its owner: an approval or question, or the agent's ask_owner."""
        return bool(self._owner_asks) or self._desk_asks()

    def state(self) -> StallState:
        if self._asking():
            return StallState.OWNER
        if self._answered:
            return StallState.EXITING
        return StallState.TOOL if self._tools else StallState.MODEL

    def _owner_time(self) -> None:
        """The turn waits on its owner: that time is not the agent's silence. The clock (and
        every open tool's) restarts, so an answer after a long wait is no stall at once."""
        now = time.monotonic()
        self._last = now
        self._tools = {k: (what, now) for k, (what, _) in self._tools.items()}

    async def _run(self) -> None:
        poll = max(0.02, min(self._after_s / 20, 1.0))  # an owner's wait is seen this soon
        while not self._silenced:
            if self._paused:  # the verdict is in: its card and check come first
                await asyncio.sleep(1.0)
                continue
            if self._asking():
                self._owner_time()
                await asyncio.sleep(poll)
                continue
            quiet = time.monotonic() - self._last
            if quiet < self._after_s:
                await asyncio.sleep(min(self._after_s - quiet + 0.05, poll))
                continue
            state = self.state()
            if state is not StallState.OWNER and state not in self._told:
                self._told.add(state)
                self._silenced = not await self._speak(state, quiet)
            await asyncio.sleep(poll)  # a state that changes is seen soon

    async def _speak(self, state: StallState, quiet_s: float) -> bool:
        """One message naming ``state``; False, and no word, when the owner chose Keep waiting
        (a tap in any process). The earlier message is read with its row locked: a tap
        meanwhile waits, then silences the message sent here."""
        text = self._text(state, quiet_s)
        markup = stall_keyboard(self._notifier.texts, self._task.locale, self._turn_id)
        async with self._store.atomic():
            previous = await self._store.stalls.get(self._turn_id, lock=True)
            if previous is not None and previous.state is StallNoticeState.WAITING:
                log.info("task %s turn %s: stalled; kept waiting", self._task.id, self._turn_id)
                return False
            if previous is not None:  # an earlier state's message: its buttons go
                await self._notifier.edit_row(previous.chat_id, previous.row_id, previous.text)
            row_id = await self._notifier.send(self._task, text, MessageKind.STATUS, markup=markup)
            notice = StallNotice(self._turn_id, self._task.chat_id, row_id, text)
            await self._store.stalls.spoke(notice)
            self._row_id = row_id  # before the commit: a cancel during it leaves no row unclosed
        log.info("task %s turn %s: stalled (%s); said so", self._task.id, self._turn_id, state)
        return True

    def _text(self, state: StallState, quiet_s: float) -> str:
        texts, loc = self._notifier.texts, self._task.locale
        params: dict[str, object] = {
            "label": self._task.label,
            "elapsed": elapsed(texts, loc, quiet_s),
        }
        if state is StallState.TOOL:
            what, since = min(self._tools.values(), key=lambda t: t[1])
            params["elapsed"] = elapsed(texts, loc, time.monotonic() - since)
            params["command"] = shorten(what, COMMAND_CHARS, one_line=True)
        return self._notifier.text(loc, f"stall.{state}", **params)


def elapsed(texts: Texts, locale: str, seconds: float) -> str:
    """How long a turn has been quiet, as it was: ``21 s`` under a minute, ``2 min`` above."""
    whole = round(seconds)
    if whole < 60:
        return texts.get(locale, "stall.seconds", n=max(1, whole))
    return texts.get(locale, "stall.minutes", n=round(seconds / 60))
