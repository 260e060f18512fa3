"""What `detach mcp` offers other agents, apart from the MCP wiring (``bot.mcp.server``) and the
hand-off of a task to the running bot (``bot.mcp.handoff``).

It works on the bot's database and data directory, like `detach add`, so the bot must be
running: it starts and reports the tasks. A task is started as a task file in the bot's inbox
(the same path as `detach add --worktree`), so the bot plans it, cuts its worktree, picks its
sandbox and acknowledges it in Telegram saying which client started it; the tool waits, bounded,
until the bot took the file. Tasks belong to one owner (DETACH_MCP_CHAT, else the first allowed
user); a client sees and touches only that owner's tasks. Approvals stay with the owner in
Telegram: no call here answers one."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot.errors import ToolRefused, UserInputError
from bot.mcp.handoff import (
    ALIVE_STALE_S,
    POLL_S,
    START_WAIT_S,
    bot_runs,
    one_line,
    plain_goal,
    taken,
)
from bot.models import ApprovalMode, Task, TaskStatus, Turn
from bot.store import Store
from bot.tasks.taskfile import TaskFile, drop
from bot.turns.transcript import human_line

if TYPE_CHECKING:
    from bot.money.desk import MoneyDesk
    from bot.tasks.followup import FollowUps
    from bot.telegram.notifier import Notifier

log = logging.getLogger(__name__)

WATCH_MAX_S = 120.0
PAGE_MAX = 500
ANSWER_CHARS = 20_000
MODES = tuple(m.value for m in ApprovalMode)
CHECK_REFUSED = (
    "check: a sub-task runs its parent's check, the one the owner chose; an agent may not "
    "name a command for the bot to run. Nothing was started: call start again without check"
)


@dataclass(frozen=True, slots=True)
class McpPlace:
    """Where the bot lives and whom the tasks belong to."""

    data_dir: Path
    owner: int
    chat_id: int  # where its tasks report: the owner's private chat, or a group
    engines: tuple[str, ...]
    max_prompt_chars: int
    alive_file: Path
    alive_stale_s: float = ALIVE_STALE_S
    start_wait_s: float = START_WAIT_S
    parent: Task | None = None  # `--parent`: an agent's own sub-tasks, only those
    max_subtasks: int = 5
    reply_default: str = "queue"  # DETACH_REPLY_DEFAULT: a follow-up while a turn runs
    timezone: str = "UTC"  # DETACH_TIMEZONE: for owners who set no /tz


class McpDesk:
    def __init__(
        self,
        store: Store,
        place: McpPlace,
        notifier: Notifier | None = None,
        money: MoneyDesk | None = None,
    ) -> None:
        """``notifier`` tells the owner's chat about follow-ups and cancels (its outbox rows
        are delivered by the bot); built from the catalogs on first use when not given.
        ``money``: the daily cap a follow-up keeps (None: none checked)."""
        self._store = store
        self._place = place
        self._notifier = notifier
        self._money = money

    # -- the tools ---------------------------------------------------------------------------
    async def start(
        self,
        goal: str,
        client: str,
        engine: str | None = None,
        model: str | None = None,
        cwd: str | None = None,
        worktree: bool | None = None,
        mode: str | None = None,
        check: str | None = None,
    ) -> dict[str, Any]:
        goal = self._prompt(goal, "goal")
        if engine is not None and engine not in self._place.engines:
            raise ToolRefused(
                f"unknown engine {engine!r}; one of: {', '.join(self._place.engines)}"
            )
        if mode is not None and mode not in MODES:
            raise ToolRefused(f"unknown mode {mode!r}; one of: {', '.join(MODES)}")
        for name, value in (("model", model), ("cwd", cwd), ("check", check)):
            if value is not None and (not value.strip() or "\n" in value or len(value) > 1000):
                raise ToolRefused(f"{name} must be one non-empty line")
        if check is not None and self._place.parent is not None:
            raise ToolRefused(CHECK_REFUSED)
        bot_runs(self._place.alive_file, self._place.alive_stale_s)
        budget = await self._subtask_budget() if self._place.parent is not None else None
        inbox = self._place.data_dir / "inbox"
        tf = TaskFile(
            goal=plain_goal(goal),
            created=datetime.now(UTC),
            chat_id=self._place.chat_id,
            model=model,
            cwd=cwd,
            engine=engine,
            worktree=None if worktree is None else ("yes" if worktree else "no"),
            mode=mode,
            check=check,
            client=one_line(client),
            max_usd=budget,
            parent=self._place.parent.id if self._place.parent is not None else None,
        )
        path = drop(inbox, tf, "mcp")
        task_id = await taken(path, self._place.start_wait_s)
        task = await self._own(task_id)
        log.info("task %s started by MCP client %s", task.id, client)
        return {**_brief(task), "note": "reported in Telegram; approvals are the owner's there"}

    async def status(self, task_id: int) -> dict[str, Any]:
        task = await self._own(task_id)
        turns = await self._store.tasks.turns_of(task.id)
        last = turns[-1] if turns else None
        found: dict[str, Any] = {
            **_brief(task),
            "title": task.title,
            "cwd": task.cwd,
            "model": task.model,
            "mode": task.approval_mode.value,
            "created_at": task.created_at.isoformat(),
            "cost_usd": round(task.total_cost_usd, 6),
            "turns": len(turns),
            "waiting_for_approval": await self._store.questions.pending_count(task.id) > 0,
        }
        if last is not None:
            found["last_turn"] = _turn(last)
        return found

    async def pr(self, task_id: int) -> dict[str, Any]:
        """The task's pull request as its card follows it (the owner opens it, in Telegram)."""
        task = await self._own(task_id)
        pr = await self._store.prs.get(task.id)
        if pr is None:
            return {**_brief(task), "pr": None, "note": "no PR: its owner opens one from the card"}
        found = {"number": pr.number, "url": pr.url, "state": pr.state.value}
        return {**_brief(task), "pr": {**found, "checks": pr.checks.value, "head": pr.head_sha}}

    async def watch(
        self, task_id: int, cursor: int = 0, timeout_s: float = 30.0, until_done: bool = False
    ) -> dict[str, Any]:
        """New output after ``cursor``: returns as soon as there is some (``until_done``: once
        the task is no longer queued or running), or after ``timeout_s``."""
        task = await self._own(task_id)
        if cursor < 0:
            raise ToolRefused("cursor must be 0 or a cursor an earlier call returned")
        deadline = time.monotonic() + min(max(timeout_s, 0.0), WATCH_MAX_S)
        lines: list[str] = []
        while True:
            read, cursor, full = await self._read(task.id, cursor, lines)
            task = await self._own(task_id)
            settled = not task.status.active and not read  # finished, and all of it read
            wanted = bool(lines) and not until_done
            if full or settled or wanted or time.monotonic() >= deadline:
                break
            if not read:
                await asyncio.sleep(POLL_S)
        found: dict[str, Any] = {**_brief(task), "cursor": cursor, "lines": lines}
        found["done"] = not task.status.active
        if found["done"]:
            last = await self._store.tasks.last_turn(task.id)
            if last is not None:
                found["last_turn"] = _turn(last)
        elif not lines:
            found["note"] = "nothing new yet: call watch again with this cursor"
        return found

    async def _read(self, task_id: int, cursor: int, lines: list[str]) -> tuple[int, int, bool]:
        """Events after ``cursor`` appended to ``lines`` as text: how many were read, the new
        cursor, and whether a whole page came (more may follow at once)."""
        events = await self._store.transcript.after(task_id, cursor, PAGE_MAX)
        for event in events:
            cursor = event.line
            line = human_line(event.kind, event.body)
            if line:
                lines.append(line)
        return len(events), cursor, len(events) == PAGE_MAX

    async def output(self, task_id: int, cursor: int = 0, limit: int = 100) -> dict[str, Any]:
        """One page of the transcript after ``cursor``, and the cursor of the next page."""
        task = await self._own(task_id)
        if cursor < 0 or not 1 <= limit <= PAGE_MAX:
            raise ToolRefused(f"cursor must be 0 or more and limit 1 to {PAGE_MAX}")
        events = await self._store.transcript.after(task.id, cursor, limit)
        lines = [line for e in events if (line := human_line(e.kind, e.body))]
        next_cursor = events[-1].line if events else cursor
        return {
            **_brief(task),
            "cursor": next_cursor,
            "lines": lines,
            "more": len(events) == limit,
        }

    async def followup(
        self, task_id: int, prompt: str, client: str, steer: bool | None = None
    ) -> dict[str, Any]:
        """The next turn of the task, in the same agent session, as a reply in Telegram would
        be (``bot.tasks.followup``): after the running turn, or (``steer``; None: what
        DETACH_REPLY_DEFAULT says) into it, which the bot carries out."""
        prompt = self._prompt(prompt, "prompt")
        task = await self._own(task_id)
        if task.status is TaskStatus.ARCHIVED:
            raise ToolRefused(f"{task.label} is archived")
        if await self._store.terminal.get(task.id) is not None:
            raise ToolRefused(f"{task.label} is held at the terminal; its owner takes it back")
        bot_runs(self._place.alive_file, self._place.alive_stale_s)
        from bot.models import FollowUpDoor
        from bot.tasks.followup import FollowUp

        wanted = self._place.reply_default == "steer" if steer is None else steer
        asked = FollowUp(
            user_id=task.owner_id,
            task_id=task.id,
            prompt=prompt,
            door=FollowUpDoor.MCP,
            steer=wanted,
            client=one_line(client),
        )
        try:
            done = await self._followups().follow_up(asked)
        except UserInputError as exc:  # over the daily cap, say
            raise ToolRefused(self._said(exc)) from None
        assert done is not None  # it answers no message: never a repeat
        task = await self._own(task_id)
        found = {**_brief(task), "turn": done.turn.seq, "behind_running_turn": done.behind}
        return found | ({"steer": str(done.steer)} if done.steer is not None else {})

    async def cancel(self, task_id: int, client: str) -> dict[str, Any]:
        """Cancel the task's queued turns and stop its running one (the bot stops it)."""
        task = await self._own(task_id)
        notifier = self._notify()
        async with self._store.atomic():
            dropped = await self._store.tasks.cancel_queued(task.id)
            stopping = await self._store.claims.request_stop(task.id)
            if not dropped and not stopping:
                raise ToolRefused(f"{task.label} is not running or queued ({task.status.value})")
            if not stopping:
                await self._store.tasks.set_status(
                    task.id,
                    TaskStatus.CANCELLED,
                    only_from=[TaskStatus.QUEUED, TaskStatus.WAITING_FOR_LIMIT],
                )
                task = await self._own(task_id)
                await notifier.ack_status(task)
                await notifier.buttons_follow(task)
            await self._store.audit.record("task_cancelled", task.owner_id, task.id, client)
        return {**_brief(task), "stopping": stopping, "dropped_turns": dropped}

    async def list(self, active_only: bool = False, limit: int = 20) -> dict[str, Any]:
        if not 1 <= limit <= 100:
            raise ToolRefused("limit must be 1 to 100")
        statuses = [s for s in TaskStatus if s.active] if active_only else None
        if self._place.parent is not None:
            children = await self._store.tasks.children(self._place.parent.id)
            found = [t for t in children if statuses is None or t.status in statuses][-limit:]
        else:
            found = await self._store.tasks.list_for(self._place.owner, statuses, limit)
        return {"tasks": [{**_brief(t), "title": t.title} for t in found]}

    # -- helpers -----------------------------------------------------------------------------
    def _prompt(self, text: str, name: str) -> str:
        text = text.replace("\x00", "").strip()
        if not text:
            raise ToolRefused(f"{name} is empty")
        if len(text) > self._place.max_prompt_chars:
            raise ToolRefused(
                f"{name} has {len(text)} characters; at most {self._place.max_prompt_chars}: "
                "put the details in a file in the working directory and name it"
            )
        return text

    async def _own(self, task_id: int) -> Task:
        """The owner's task (under ``--parent``: one of the parent's sub-tasks)."""
        task = await self._store.tasks.get(task_id) if 0 < task_id < 2**53 else None
        parent = self._place.parent
        if (
            task is None
            or task.owner_id != self._place.owner
            or (parent is not None and task.parent_id != parent.id)
        ):
            raise ToolRefused(f"no task #{task_id} (see list)")
        return task

    async def _subtask_budget(self) -> str | None:
        """A sub-task's budget: what is left of the parent's (its own spend and its other
        sub-tasks' count); refused when none is left or it started the most it may."""
        parent = self._place.parent
        assert parent is not None
        children = await self._store.tasks.children(parent.id)
        if len(children) >= self._place.max_subtasks:
            raise ToolRefused(
                f"this task has started {len(children)} sub-tasks, the most it may "
                "(DETACH_MAX_SUBTASKS); finish the work yourself"
            )
        now = await self._store.tasks.get(parent.id)
        if now is None or now.max_usd is None:
            return None
        left = now.max_usd - now.total_cost_usd - sum(c.total_cost_usd for c in children)
        if left <= 0.001:
            raise ToolRefused("this task's budget is spent: no sub-task can start")
        return f"{left:.4f}"

    def _notify(self) -> Notifier:
        if self._notifier is None:  # aiogram's types load here, not when the server starts
            from bot.telegram.notifier import Notifier
            from bot.telegram.outbox import Outbox
            from bot.telegram.texts import Texts

            self._notifier = Notifier(self._store, Texts(), Outbox(self._store))
        return self._notifier

    def _followups(self) -> FollowUps:
        """The one follow-up use case, as a process that runs no turn has it: the bot submits
        the turn and steers it (``SteerRequests``)."""
        from bot.tasks.followup import FollowUps
        from bot.tasks.nextturn import NextTurns
        from bot.tasks.planning import valid_prompt
        from bot.tasks.steering import SteerRequests

        notifier, place = self._notify(), self._place
        return FollowUps(
            store=self._store,
            turns=NextTurns(self._store, notifier, None, place.timezone),
            notifier=notifier,
            money=self._money,
            validate=functools.partial(valid_prompt, max_chars=place.max_prompt_chars),
            steering=SteerRequests(self._store, notifier),
        )

    def _said(self, exc: UserInputError) -> str:
        from bot.telegram.render import plain
        from bot.telegram.texts import DEFAULT_LOCALE

        return plain(self._notify().texts.get(DEFAULT_LOCALE, exc.key, **exc.params))


def _brief(task: Task) -> dict[str, Any]:
    return {
        "task_id": task.id,
        "label": task.label,
        "engine": task.engine,
        "status": task.status.value,
    }


def _turn(turn: Turn) -> dict[str, Any]:
    found: dict[str, Any] = {"turn": turn.seq, "status": turn.status.value}
    if turn.result_text:
        answer = turn.result_text
        found["answer"] = answer if len(answer) <= ANSWER_CHARS else answer[:ANSWER_CHARS] + " …"
    if turn.error is not None:
        found["error"] = turn.error.key.removeprefix("turn_error.")
        if "text" in turn.error.params:
            found["error"] = str(turn.error.params["text"])[:2000]
    return found
