"""What waits on the owner, at a glance: for /tasks, what each task waits for, named as on every
surface (``bot.models.WaitState``: an approval, an answer, consent to its check, a budget
decision, its engine's usage limit, the terminal), and the tasks its preflight holds before they
start; for /limits, each engine's plan windows as its CLI last reported them, its limit in
force and the tasks that wait for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.models import Task, TaskStatus, WaitState
from bot.store import Store
from bot.telegram.lifecycle import status_shown
from bot.telegram.render import shorten
from bot.telegram.texts import Texts
from bot.turns.outcome import local_time
from bot.turns.windows import window_name

GOAL_CHARS = 80  # of a held task's goal on its /tasks line


@dataclass(frozen=True, slots=True)
class Shown:
    """A task as /tasks lists it: its icon and state (what it waits for, named as on every
    surface, else its status), and when its engine's usage limit resets (or None)."""

    task: Task
    icon: str
    state: str
    resets: str | None = None


@dataclass(frozen=True, slots=True)
class Waits:
    """The owner's open tasks, those that wait first; and the tasks held by their preflight
    before they exist (one line each)."""

    tasks: list[Shown]
    held: list[str]


class Waiting:
    def __init__(self, store: Store, texts: Texts, timezone: str) -> None:
        """``timezone``: for owners who set no /tz."""
        self._store = store
        self._texts = texts
        self._timezone = timezone

    async def _zone(self, user_id: int) -> str:
        return await self._store.users.tz(user_id) or self._timezone

    async def of(self, user_id: int, tasks: Sequence[Task], locale: str) -> Waits:
        waits = await self._store.waits.of(tasks)
        limits = await self._store.limits.active()
        zone = await self._zone(user_id)
        shown = []
        for task in tasks:
            wait = waits.get(task.id)
            icon, state = status_shown(self._texts, locale, task, wait)
            until = limits.get(task.engine) if wait is WaitState.USAGE_LIMIT else None
            resets = local_time(until, zone) if until else None
            shown.append(Shown(task, icon, state, resets))
        shown.sort(key=lambda row: waits.get(row.task.id) is None)  # stable: the rest keep order
        holds = [h for h in await self._store.preflights.pending() if h.owner_id == user_id]
        name = self._texts.wait(locale, WaitState.PREFLIGHT)
        held = [
            self._texts.get(
                locale, "tasks.held", goal=shorten(h.text, GOAL_CHARS, one_line=True), wait=name
            )
            for h in holds
        ]
        return Waits(shown, held)

    async def limits(self, user_id: int, locale: str, engines: Sequence[str]) -> str:
        """/limits: per engine, its windows (use and reset), its limit in force and the tasks
        waiting for it; an engine that reported no window says so."""
        zone, now = await self._zone(user_id), datetime.now(UTC)
        windows = await self._store.windows.all()
        limits = await self._store.limits.active()
        waiting = await self._store.tasks.list_for(user_id, [TaskStatus.WAITING_FOR_LIMIT], 50)
        lines = [self._texts.get(locale, "limits.header")]
        for engine in sorted({*engines, *(w.engine for w in windows), *limits}):
            lines.append(self._texts.get(locale, "limits.engine", engine=engine.capitalize()))
            shown = [w for w in windows if w.engine == engine]
            for w in shown:
                name = window_name(self._texts, locale, w.window)
                used = f"{round(w.used * 100)} %" if w.used is not None else "?"
                at = local_time(w.resets_at, zone, now) if w.resets_at else "?"
                lines.append(self._texts.get(locale, "limits.line", window=name, used=used, at=at))
            if engine in limits:
                at = local_time(limits[engine], zone, now)
                lines.append(self._texts.get(locale, "limits.limited", at=at))
            elif not shown:
                lines.append(self._texts.get(locale, "limits.none"))
            labels = ", ".join(t.label for t in waiting if t.engine == engine)
            if labels:
                lines.append(self._texts.get(locale, "limits.waiting", labels=labels))
        return "\n".join(lines)
