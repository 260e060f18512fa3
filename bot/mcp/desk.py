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
import logging
import time
from collections.abc import Sequence
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
from bot.models import ApprovalMode, Task, Turn
from bot.tasks.taskfile import TaskFile, drop
from bot.turns.transcript import human_line

if TYPE_CHECKING:
    from bot.tasks.clients import ClientTasks

log = logging.getLogger(__name__)

WATCH_MAX_S = 120.0
WAIT_MAX_S = 600.0  # `wait`: the agents' tool timeouts are set above it (Codex, /local)
PAGE_MAX = 500
ANSWER_CHARS = 20_000
MODES = tuple(m.value for m in ApprovalMode)
CHECK_REFUSED = (
    "check: a sub-task runs its parent's check, the one the owner chose; an agent may not "
    "name a command for the bot to run. Nothing was started: call start again without check"
)


@dataclass(frozen=True, slots=True)
class McpPlace:
    """Where the bot lives and whom the tasks belong to (``ClientTasks``: which it may touch)."""

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
    def __init__(self, tasks: ClientTasks, place: McpPlace) -> None:
        """``tasks``: the use case of a client's tasks (``place.parent``'s sub-tasks under
        ``--parent``: ``ClientTasks.scoped_to``)."""
        self._tasks = tasks
        self._place = place

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
        budget = await self._tasks.subtask_budget() if self._place.parent is not None else None
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
        turns = await self._tasks.turns(task)
        last = turns[-1] if turns else None
        found: dict[str, Any] = {
            **_brief(task),
            "title": task.title,
            "cwd": task.cwd,
            "model": task.model,  # asked for (None: the engine's default)
            "model_ran": (await self._tasks.ran([task])).get(task.id),
            "mode": task.approval_mode.value,
            "created_at": task.created_at.isoformat(),
            "cost_usd": round(task.total_cost_usd, 6),
            "turns": len(turns),
            "waiting_for_approval": await self._tasks.asks_approval(task),
        }
        if last is not None:
            found["last_turn"] = _turn(last)
        return found

    async def pr(self, task_id: int) -> dict[str, Any]:
        """The task's pull request as its card follows it (the owner opens it, in Telegram)."""
        task = await self._own(task_id)
        pr = await self._tasks.pr(task)
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
            last = await self._tasks.last_turn(task)
            if last is not None:
                found["last_turn"] = _turn(last)
        elif not lines:
            found["note"] = "nothing new yet: call watch again with this cursor"
        return found

    async def _read(self, task_id: int, cursor: int, lines: list[str]) -> tuple[int, int, bool]:
        """Events after ``cursor`` appended to ``lines`` as text: how many were read, the new
        cursor, and whether a whole page came (more may follow at once)."""
        events = await self._tasks.events(task_id, cursor, PAGE_MAX)
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
        events = await self._tasks.events(task.id, cursor, limit)
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
            done = await self._tasks.follow_up(asked)
        except UserInputError as exc:  # over the daily cap, say
            raise ToolRefused(self._said(exc)) from None
        task = await self._own(task_id)
        found = {**_brief(task), "turn": done.turn.seq, "behind_running_turn": done.behind}
        return found | ({"steer": str(done.steer)} if done.steer is not None else {})

    async def cancel(self, task_id: int, client: str) -> dict[str, Any]:
        """Cancel the task's queued turns and stop its running one (the bot stops it)."""
        try:
            done = await self._tasks.cancel(task_id, client)
        except UserInputError as exc:  # neither running nor queued
            raise ToolRefused(self._said(exc)) from None
        return {**_brief(done.now), "stopping": done.stopping, "dropped_turns": done.dropped}

    async def list(self, active_only: bool = False, limit: int = 20) -> dict[str, Any]:
        if not 1 <= limit <= 100:
            raise ToolRefused("limit must be 1 to 100")
        found = await self._tasks.listed(active_only, limit)
        ran = await self._tasks.ran(found)
        return {
            "tasks": [
                {**_brief(t), "title": t.title, "model": t.model, "model_ran": ran.get(t.id)}
                for t in found
            ]
        }

    async def notify(self, text: str, urgent: bool = False) -> dict[str, Any]:
        """A short note of this task's agent to its owner (``ClientTasks.notify``)."""
        return await self._tasks.notify(text, urgent)

    # -- the sub-task tree (issue #55) -------------------------------------------------------
    async def wait(self, task_id: int, timeout_s: float = WAIT_MAX_S) -> dict[str, Any]:
        """Block until the task's turn has ended (at most ``timeout_s``, WAIT_MAX_S) and
        return its answer; ``done`` false: it still runs, wait again."""
        timeout_s = min(max(timeout_s, 0.0), WAIT_MAX_S)
        task, starves = await self._tasks.settled(task_id, timeout_s)
        found: dict[str, Any] = {**_brief(task), "done": not task.status.active}
        last = await self._tasks.last_turn(task)
        if found["done"] and last is not None:
            found["last_turn"] = _turn(last)
        elif starves:
            found["note"] = (
                "still queued: every turn slot (DETACH_MAX_CONCURRENT_TURNS) is taken, some by "
                "tasks that wait like you. Waiting longer will not help: finish your turn with "
                "what you have (the child runs after it; its answer reaches the owner), or "
                "cancel it"
            )
        else:
            found["note"] = "still running: call wait again, or do other work meanwhile"
        return found

    async def report(self, text: str) -> dict[str, Any]:
        return await self._tasks.family().report(text)

    async def message(self, task_id: int, text: str) -> dict[str, Any]:
        return await self._tasks.family().message(task_id, text)

    async def inbox(self, cursor: int = 0) -> dict[str, Any]:
        return await self._tasks.family().inbox(cursor)

    async def ask_owner(self, question: str, answers: Sequence[str]) -> dict[str, Any]:
        """This task's agent asks its owner, and waits (``ClientTasks.ask_owner``)."""
        return await self._tasks.ask_owner(question, answers)

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
        return await self._tasks.own(task_id)

    def _said(self, exc: UserInputError) -> str:
        from bot.telegram.render import plain
        from bot.telegram.texts import DEFAULT_LOCALE

        return plain(self._tasks.notifier().texts.get(DEFAULT_LOCALE, exc.key, **exc.params))


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
