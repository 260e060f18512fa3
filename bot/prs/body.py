"""What a task's PR says: its title from the task, its body the goal, the check command and its
last result, the cost, the engine and model that ran, and the board's page of the task when the
board is public. In the task's language."""

from __future__ import annotations

from bot.models import Task
from bot.store import Store
from bot.telegram.texts import Texts

GOAL_CHARS = 4000
TITLE_CHARS = 72


def title(task: Task) -> str:
    return task.title[:TITLE_CHARS] or task.slug


async def body(store: Store, texts: Texts, task: Task, board_url: str | None) -> str:
    loc = task.locale

    def say(key: str, **params: str) -> str:  # Markdown for GitHub: not escaped as HTML
        return texts.template(loc, key).format(**params)

    turns = await store.tasks.turns_of(task.id)
    goal = (turns[0].prompt if turns else task.title)[:GOAL_CHARS]
    last = turns[-1] if turns else None
    check = await store.checks.for_turn(last.id) if last is not None and task.check else None
    if check is None:
        said = say("pr.body_no_check")
    else:
        key = "pr.body_check_passed" if check.passed else "pr.body_check_failed"
        said = say(key, command=check.command, code=str(check.exit_code))
    lines = [
        goal,
        "",
        "---",
        said,
        say("pr.body_cost", cost=f"{task.total_cost_usd:.4f}"),
        say("pr.body_engine", engine=task.engine, model=(last and last.model) or task.model or "-"),
    ]
    if board_url:
        lines.append(say("pr.body_board", url=f"{board_url}/tasks/{task.id}"))
    lines.append(say("pr.body_footer", label=task.label))
    return "\n".join(lines)
