"""What /result says of a task with no answer yet: a running one since when and its latest
line (what the agent last said or did), else its state."""

from __future__ import annotations

from bot.errors import TaskStateError
from bot.models import Task, TaskStatus, Turn
from bot.store import Store
from bot.store.db import utcnow
from bot.telegram.render import age, shorten
from bot.telegram.texts import Texts
from bot.turns.transcript import human_line

LAST_LINES = 20  # how far back the latest readable line is looked for
LAST_CHARS = 200


async def no_answer_yet(
    store: Store, texts: Texts, task: Task, turn: Turn | None
) -> TaskStateError:
    """The refusal /result gives while ``turn`` (the task's last) has no answer."""
    status = texts.status(task.locale, task.status)
    if task.status is not TaskStatus.RUNNING or turn is None or turn.started_at is None:
        return TaskStateError("tasks.no_result", label=task.label, status=status)
    lines = [
        line
        for x in await store.transcript.tail(task.id, LAST_LINES)
        if x.turn_id == turn.id and (line := human_line(x.kind, x.body))
    ]
    since = age(turn.started_at, utcnow())
    if not lines:
        return TaskStateError("tasks.result_running", label=task.label, since=since)
    last = shorten(lines[-1].strip(), LAST_CHARS, one_line=True)
    return TaskStateError("tasks.result_running_last", label=task.label, since=since, last=last)
