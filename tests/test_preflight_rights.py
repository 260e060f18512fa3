"""``engine=auto`` never widens what the owner chose: a task moves to another engine only when
that engine can run it with the rights it was planned with."""

from __future__ import annotations

from pathlib import Path

from bot.models import ApprovalMode, NewTask, TaskKind
from bot.tasks.planning import TaskDefaults
from bot.tasks.routing import TaskRouter


def router(no_sandbox: set[str], subtask_engines: frozenset[str] = frozenset()) -> TaskRouter:
    defaults = TaskDefaults(
        engine="claude",
        max_prompt_chars=1000,
        sandbox_problem=lambda engine: "no bwrap" if engine in no_sandbox else None,
        subtask_engines=subtask_engines,
    )
    return TaskRouter(None, defaults)  # type: ignore[arg-type]  # honours() asks no queue


def task(mode: ApprovalMode, subtasks: bool = False) -> NewTask:
    return NewTask(
        1, 1, "claude", TaskKind.DETACH, "fix it", Path("/w"), approval_mode=mode, subtasks=subtasks
    )


def test_a_sandboxed_task_goes_only_where_the_sandbox_works():
    assert router(set()).honours("local", task(ApprovalMode.SANDBOX))
    assert not router({"local"}).honours("local", task(ApprovalMode.SANDBOX))
    assert router({"local"}).honours("local", task(ApprovalMode.ASK))  # no sandbox to keep


def test_subtasks_go_only_where_detach_mcp_can_be_given():
    assert not router(set()).honours("local", task(ApprovalMode.ASK, subtasks=True))
    both = frozenset({"claude", "local"})
    assert router(set(), both).honours("local", task(ApprovalMode.ASK, subtasks=True))
