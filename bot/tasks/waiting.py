"""What waits on the owner, at a glance: for /tasks, what each task waits for (an approval, an
answer, a budget decision, its engine's usage limit) and the preflight questions held before a
task starts; for /limits, each engine's plan windows as its CLI last reported them, its limit in
force and the tasks that wait for it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.models import QuestionKind, Task, TaskStatus
from bot.store import Store
from bot.telegram.texts import Texts
from bot.turns.outcome import local_time
from bot.turns.windows import window_name

_WAITS = {
    QuestionKind.APPROVAL: "tasks.waits_approval",
    QuestionKind.QUESTION: "tasks.waits_question",
    QuestionKind.BUDGET: "tasks.waits_budget",
}


@dataclass(frozen=True, slots=True)
class Waits:
    """The owner's open tasks with what each waits for (``None``: nothing of the owner's),
    those that wait first; and the preflight questions held before a task exists."""

    tasks: list[tuple[Task, str | None]]
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
        questions = await self._store.questions.pending_of([t.id for t in tasks])
        asked = {q.task_id: q.kind for q in reversed(questions)}  # the oldest one says
        limits = await self._store.limits.active()
        zone = await self._zone(user_id)
        found: list[tuple[Task, str | None]] = []
        for task in tasks:
            why: str | None = None
            if task.id in asked:
                why = self._texts.get(locale, _WAITS[QuestionKind(asked[task.id])])
            elif task.status is TaskStatus.WAITING_FOR_LIMIT:
                until = limits.get(task.engine)
                at = local_time(until, zone) if until else "?"
                why = self._texts.get(
                    locale, "tasks.waits_limit", engine=task.engine.capitalize(), at=at
                )
            found.append((task, why))
        found.sort(key=lambda pair: pair[1] is None)  # stable: the rest keep their order
        holds = [h for h in await self._store.preflights.pending() if h.owner_id == user_id]
        held = [
            self._texts.get(locale, "tasks.waits_preflight", question=h.question) for h in holds
        ]
        return Waits(found, held)

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
