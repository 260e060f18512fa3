"""A task as a task file (``bot/tasks/taskfile.py``'s format): its goal and constraints, the last
answer as ``# Result``, and once it finished the trailing block. The inbox writes it to
``inbox/done/`` for a task that came as a file; the task card and ``detach export`` send it."""

from __future__ import annotations

from bot.errors import TaskNotFound
from bot.models import CheckResult, Turn
from bot.store import Store
from bot.tasks.taskfile import TaskFile, render
from bot.telegram.texts import Texts
from bot.turns.preambles import KIND, said


async def export(store: Store, task_id: int, texts: Texts) -> str:
    """The task in the task-file format: its goal and constraints (as dropped in, or its first
    request), the last answer as ``# Result``, and when finished the trailing block."""
    task = await store.tasks.get(task_id)
    if task is None:
        raise TaskNotFound(f"#{task_id}")
    source = await store.task_files.get(task_id)
    first = await store.tasks.first_turn(task_id)
    last = await store.tasks.last_turn(task_id)
    goal = source.goal if source else (first.prompt if first else task.title)
    question, answer, goal = await _clarified(store, texts, task_id, task.locale, goal)
    finished = last is not None and not last.status.active and last.finished_at is not None
    started = first.started_at if first and first.started_at else task.created_at
    check = await store.checks.last(task_id) if finished else None
    return render(
        TaskFile(
            goal=goal,
            constraints=source.constraints if source else "",
            result=_result(last, texts, task.locale) if last and finished else "",
            question=question,
            answer=answer,
            created=task.created_at,
            chat_id=task.chat_id,
            slug=task.slug,
            model=task.preset,
            mode=task.approval_mode.value,
            check=task.check,
            completed=last.finished_at if finished and last else None,
            duration_seconds=(
                round((last.finished_at - started).total_seconds())
                if finished and last and last.finished_at
                else None
            ),
            status=task.status.value if finished else None,
            check_status=_verdict(check) if check else None,
            check_round=check.round if check else None,
            preamble=await _preamble(store, task_id) if finished else None,
        )
    )


async def _clarified(
    store: Store, texts: Texts, task_id: int, locale: str, goal: str
) -> tuple[str, str, str]:
    """The preflight's question and the owner's answer ("" when none came) if a question held
    the task, and the goal without the line the answer added to it."""
    hold = await store.preflights.of_task(task_id)
    if hold is None or not hold.question:
        return "", "", goal
    answer = hold.answer or "" if hold.status == "answered" else ""
    key = "preflight.clarified" if answer else "preflight.best_judgement"
    added = "\n\n" + texts.template(locale, key).format(question=hold.question, answer=answer)
    return hold.question, answer, goal.removesuffix(added)


async def _preamble(store: Store, task_id: int) -> str | None:
    """Which owner's preamble the last turn that read one was told (None: none chosen)."""
    line = await store.transcript.last_of(task_id, KIND)
    return said(line.body) if line is not None else None


def _result(turn: Turn, texts: Texts, locale: str) -> str:
    if turn.result_text or turn.error is None:
        return turn.result_text or ""
    return texts.error(locale, turn.error)


def _verdict(check: CheckResult) -> str:
    if not check.approved:
        return "not_run"  # the owner did not approve the repository's check
    return "passed" if check.passed else "failed"
