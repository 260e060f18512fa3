"""What the board's pages show, as JSON: a task's row (what it waits for named as on every
surface), the tasks held by their preflight, a task's page (goal, turns and their spend, checks,
pending questions, its worktree's state), its transcript as items and its diff per file. Only
the owner's tasks: another user's task is reported exactly like a missing one (``None``)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot.approvals.view import DONE
from bot.board.checkout import checkout_patch, patch_since
from bot.board.holds import held_rows
from bot.board.hosts import host_row, hosts_title
from bot.errors import TaskNotFound, UserInputError
from bot.fleet.status import FleetStatus
from bot.git.worktrees import Worktrees
from bot.models import CheckResult, Task, TaskStatus, Turn, WaitState, WorktreeState
from bot.preflight.desk import PreflightDesk
from bot.rows import PendingQuestion
from bot.tasks.audit import AuditLog
from bot.tasks.reads import PrRow, TaskPage, TaskReads
from bot.telegram.render import plain, usd
from bot.telegram.texts import Texts
from bot.turns.baseline import RECORD_KIND, from_record
from bot.turns.items import transcript_item

LIST_LIMIT = 200
PAGE = 500  # transcript events per read of a live stream
PAGE_MAX = 5000  # per request of a page's first load (one request for most tasks)
BASELINE_WITHIN = 5  # the first turn's baseline is among a transcript's first lines
_FILE_HEADER = re.compile(r"^diff --git a/(.*?) b/(.*)$")
WORK_FRESH_S = 10.0  # how long an idle worktree's "holds work" is reused by a page's stream
WORK_MEMO = 256


@dataclass(frozen=True, slots=True)
class BoardData:
    reads: TaskReads
    texts: Texts
    worktrees: Worktrees
    holds: PreflightDesk | None = None  # None: no preflight here, nothing is ever held
    audit: AuditLog | None = None  # the task page's audit section (None: none shown)
    fleet: FleetStatus | None = None  # the hosts of a shared database (None: not listed)
    # (task, its last change, worktree base) -> (when asked, whether it held work): a stream
    # reads the page at every change of the store; git is asked once per WORK_FRESH_S
    _work: dict[tuple[int, object, str], tuple[float, bool]] = field(default_factory=dict)

    async def locale(self, user_id: int) -> str:
        """The user's /lang choice, else English (the board has no Telegram language)."""
        return await self.reads.chosen_locale(user_id) or self.texts.pick(None)

    async def chosen_locale(self, user_id: int) -> str | None:
        """The user's /lang choice; None: they made none."""
        return await self.reads.chosen_locale(user_id)

    async def hosts(self, user_id: int) -> dict[str, Any]:
        """What /hosts lists, as data: each host online or not, its engines, slots in use,
        projects and usage windows (none in one process), the section's title, and how often
        the page asks again (half a heartbeat: a change shows within one)."""
        if self.fleet is None or not self.fleet.shared:
            return {"hosts": [], "title": "", "every_s": None}
        locale = await self.locale(user_id)
        rows = [host_row(h, self.texts, locale) for h in await self.fleet.hosts()]
        every_s = self.fleet.beat_s / 2
        return {"hosts": rows, "title": hosts_title(self.texts, locale), "every_s": every_s}

    async def own(self, user_id: int, task_id: int) -> Task | None:
        return await self.reads.own(user_id, task_id)

    async def tasks(self, user_id: int, archived: bool) -> list[dict[str, Any]]:
        """The tasks held by their preflight, then the user's tasks, newest first; archived
        ones only when asked for."""
        found = await self.reads.rows(user_id, archived, LIST_LIMIT)
        locale = await self.locale(user_id)
        held = await held_rows(self.holds, self.texts, user_id, locale) if self.holds else []
        rows = [self.row(r.task, r.wait, locale, r.worktree, r.ran, r.host) for r in found]
        return held + as_tree(rows)

    def row(
        self,
        task: Task,
        wait: WaitState | None,
        locale: str,
        worktree: str | None = None,
        ran: str | None = None,
        host: str | None = None,
    ) -> dict[str, Any]:
        """``wait``: what it waits for; ``worktree``: its worktree's state (active, merged,
        discarded), None: it has none; ``ran``: the model that ran it, as its engine named it
        (``model``; ``model_asked``: the one the task asked for, None: the engine's default);
        ``host``: the host that ran it last (scale-out, None in one process)."""
        return {
            "id": task.id,
            "label": task.label,
            "title": task.title,
            "status": task.status.value,
            "status_text": plain(self.texts.status(locale, task.status)),
            "wait": wait.value if wait is not None else None,
            "wait_text": plain(self.texts.wait(locale, wait)) if wait is not None else None,
            "badge": wait.value if wait is not None else task.status.value,
            "active": task.status.active,
            "running": task.status is TaskStatus.RUNNING,  # a follow-up may go into its turn
            "engine": task.engine,
            "model": ran or task.model,
            "model_asked": task.model,
            "mode": task.approval_mode.value,
            "cwd": task.cwd,
            "cost_usd": round(task.total_cost_usd, 4),
            "cost_text": "$" + usd(task.total_cost_usd),  # as the chat writes it
            "created_at": _iso(task.created_at),
            "updated_at": _iso(task.updated_at),
            "worktree": worktree,
            "host": host,
            "parent_id": task.parent_id,
            "depth": 0,  # its place in its tree as listed (``as_tree``)
        }

    async def page(self, user_id: int, task: Task) -> dict[str, Any]:
        """A task's page but its transcript (read after it, from cursor 0) and diff."""
        found = await self.page_of(user_id, task.id)
        if found is None:  # gone meanwhile
            raise TaskNotFound(f"#{task.id}")
        return found

    def _pr(self, pr: PrRow | None, locale: str) -> dict[str, Any] | None:
        """The pull request its card follows (``bot.prs``), in the words of the card's line;
        None: it has none."""
        if pr is None:
            return None
        state = plain(self.texts.get(locale, f"pr.state_{pr.state}"))
        checks = plain(self.texts.get(locale, f"pr.checks_{pr.checks}"))
        return {
            "number": pr.number,
            "url": pr.url,
            "state": pr.state,
            "checks": pr.checks,
            "state_text": state,
            "checks_text": checks,
        }

    def _page(
        self,
        found: TaskPage,
        locale: str,
        tree: dict[str, Any] | None,
        audit: list[dict[str, Any]],
    ) -> dict[str, Any]:
        state = tree["state"] if tree else None
        checks = [{"turn": seq, **_check(check)} for seq, check in found.checks]
        return {
            "task": self.row(found.task, found.wait, locale, state, found.ran, found.host),
            "goal": found.turns[0].prompt if found.turns else "",
            "turns": [
                {**_turn(t), "status_text": plain(self.texts.status(locale, t.status))}
                for t in found.turns
            ],
            "checks": checks,
            "pending": [question(q) for q in found.pending],
            "worktree": tree,
            "audit": audit,
            "pr": self._pr(found.pr, locale),
        }

    async def _audit(self, user_id: int, task: Task, locale: str) -> list[dict[str, Any]]:
        """The task's audit lines (approvals, grants, consents, budget decisions, cancels)."""
        if self.audit is None:
            return []
        lines = await self.audit.of_task(user_id, task.id, locale)
        return [{"at": _iso(x.at), "action": x.action, "text": plain(x.text)} for x in lines]

    async def worktree(self, task: Task) -> dict[str, Any] | None:
        """The task's worktree: its state, the branch it merges into, and whether it holds work
        (Merge and Discard are offered only then, on an idle task); None: it has none."""
        row = await self.worktrees.get(task.id)
        if row is None:
            return None
        work = False
        if row.state == WorktreeState.ACTIVE and not task.status.active:
            key = (task.id, task.updated_at, row.base_commit)
            at, work = self._work.get(key, (0.0, False))
            if time.monotonic() - at > WORK_FRESH_S:
                work = await self.worktrees.has_work(row)
                if len(self._work) > WORK_MEMO:
                    self._work.clear()
                self._work[key] = (time.monotonic(), work)
        return {"state": row.state, "base": row.base_branch, "changes": work}

    async def page_of(self, user_id: int, task_id: int) -> dict[str, Any] | None:
        """The page of the user's task as it is now; None: not theirs, or gone."""
        found = await self.reads.page(user_id, task_id)
        if found is None:
            return None
        locale = await self.locale(user_id)
        tree = await self.worktree(found.task)
        return self._page(found, locale, tree, await self._audit(user_id, found.task, locale))

    async def diff(self, task: Task) -> dict[str, Any]:
        """A worktree task's changes since it started, one entry per file; a task in a plain
        checkout those since its first turn's recorded baseline (``scope``: "task"), else the
        checkout's uncommitted changes, which may hold the owner's own edits too ("checkout";
        see ``bot.board.checkout``). Secret values are redacted, as everywhere the bot shows
        what an agent wrote (``Store.redact``)."""
        redact = self.reads.redact
        if await self.worktrees.get(task.id) is not None:
            try:
                found = await self.worktrees.diff(task.id)
            except UserInputError as exc:  # merged or discarded: the page says which
                base = exc.params.get("base")
                return {"files": [], "note": exc.key, "scope": "worktree", "base": base}
            files = split_patch(redact(found.patch))
            return {"files": files, "stat": redact(found.stat), "scope": "worktree"}
        first = await self.reads.lines(task.owner_id, task.id, 0, BASELINE_WITHIN)
        before = next((from_record(x.body) for x in first if x.kind == RECORD_KIND), None)
        if (
            before is not None
            and (patch := await patch_since(self.worktrees.guard, task.cwd, before)) is not None
        ):
            return {"files": split_patch(redact(patch)), "scope": "task"}
        patch = await checkout_patch(self.worktrees.guard, task.cwd)
        if patch is None:
            return {"files": [], "scope": "none"}
        return {"files": split_patch(redact(patch)), "scope": "checkout"}

    async def transcript(
        self, user_id: int, task_id: int, cursor: int, limit: int = PAGE
    ) -> tuple[list[dict[str, Any]], int]:
        """Items of at most ``limit`` events of the user's task after ``cursor``, and the
        cursor after them (when it moved by ``limit`` events, more may follow at once)."""
        lines = await self.reads.lines(user_id, task_id, cursor, min(max(limit, 1), PAGE_MAX))
        items = [item for line in lines if (item := transcript_item(line)) is not None]
        return items, lines[-1].line if lines else cursor


def question(q: PendingQuestion) -> dict[str, Any]:
    payload = q.payload
    return {
        "id": q.id,
        "kind": q.kind,
        "text": plain(str(payload.get("text", ""))),
        "options": list(payload.get("options") or []),
        "multi": bool(payload.get("multi")),
        "selected": list(payload.get("selected") or []),
        "done": DONE,  # the option that closes a multi-select
        "rule": payload.get("rule"),
    }


def split_patch(patch: str) -> list[dict[str, Any]]:
    """A git patch cut at each ``diff --git``: path, new/deleted, added and removed lines."""
    files: list[dict[str, Any]] = []
    for chunk in re.split(r"(?m)^(?=diff --git )", patch):
        if not chunk.startswith("diff --git "):
            continue
        header = _FILE_HEADER.match(chunk.split("\n", 1)[0])
        path = header.group(2) if header else chunk.split("\n", 1)[0]
        lines = chunk.split("\n")
        files.append(
            {
                "path": path,
                "new": any(x.startswith("new file mode") for x in lines[:6]),
                "deleted": any(x.startswith("deleted file mode") for x in lines[:6]),
                "added": sum(1 for x in lines if x.startswith("+") and not x.startswith("+++")),
                "removed": sum(1 for x in lines if x.startswith("-") and not x.startswith("---")),
                "patch": chunk,
            }
        )
    return files


def _check(check: CheckResult) -> dict[str, Any]:
    return {
        "command": check.command,
        "passed": check.passed,
        "exit_code": check.exit_code,
        "timed_out": check.timed_out,
        "approved": check.approved,
        "duration_s": round(check.duration_s, 1),
        "output": check.output,
    }


def _turn(turn: Turn) -> dict[str, Any]:
    return {
        "seq": turn.seq,
        "status": turn.status.value,
        "cost_usd": turn.cost_usd,
        "cost_text": None if turn.cost_usd is None else "$" + usd(turn.cost_usd),
        "input_tokens": turn.input_tokens,
        "output_tokens": turn.output_tokens,
        "duration_s": turn.duration_s,
        "model": turn.model,
        "host": turn.host,
        "prompt": turn.prompt,
    }


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def as_tree(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows (newest first) as trees: each task followed by its sub-tasks, oldest first, each
    with its ``depth``; a sub-task whose parent is not listed stands as a root."""
    listed = {r["id"] for r in rows}
    children: dict[int, list[dict[str, Any]]] = {}
    for r in reversed(rows):
        if r["parent_id"] in listed:
            children.setdefault(r["parent_id"], []).append(r)
    ordered: list[dict[str, Any]] = []

    def place(row: dict[str, Any], depth: int) -> None:
        ordered.append({**row, "depth": depth})
        for child in children.get(row["id"], ()):
            place(child, depth + 1)

    for r in rows:
        if r["parent_id"] not in listed:
            place(r, 0)
    return ordered
