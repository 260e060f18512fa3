"""A sub-task never has more rights than its parent (the task whose agent started it through
`detach mcp --parent`).

The modes are not one ladder of safety: ``sandbox`` confines the agent by the operating system
without asking, ``ask`` lets it out only through the owner's taps, ``auto`` lets it out without
asking. What a parent may hand down:

==========  ==============================
parent      its sub-tasks may run in
==========  ==============================
readonly    readonly
sandbox     sandbox, readonly
ask         ask, sandbox, readonly
auto        any mode
==========  ==============================

A parent in its own worktree gets sub-tasks in worktrees too (never the owner's checkout); a
sub-task's directory is the parent's or one inside it; its budget is what is left of the
parent's; its check is the parent's (the owner's word), never one the agent wrote; and it may
not start sub-tasks of its own (depth 1). A request beyond these is refused, with the reason,
and nothing starts: the agent may ask again within them. Omitted, each is the parent's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bot.errors import UserInputError
from bot.models import ApprovalMode, Task
from bot.store import Store

MAX_DEPTH = 3  # DETACH_SUBTASK_DEPTH's ceiling: the walks below never go deeper

_CHILD_MODES: dict[ApprovalMode, frozenset[ApprovalMode]] = {
    ApprovalMode.READONLY: frozenset({ApprovalMode.READONLY}),
    ApprovalMode.SANDBOX: frozenset({ApprovalMode.SANDBOX, ApprovalMode.READONLY}),
    ApprovalMode.ASK: frozenset({ApprovalMode.ASK, ApprovalMode.SANDBOX, ApprovalMode.READONLY}),
    ApprovalMode.AUTO: frozenset(ApprovalMode),
}


def child_modes(parent: ApprovalMode) -> frozenset[ApprovalMode]:
    """The modes a task in ``parent`` mode may give its sub-tasks (the table above)."""
    return _CHILD_MODES[parent]


@dataclass(frozen=True, slots=True)
class Lineage:
    """The parent a sub-task is planned under: the task (as stored now), whether it runs in a
    worktree of its own, and how much of its budget is left (None: it has none)."""

    parent: Task
    in_worktree: bool
    budget_left_usd: float | None
    depth: int = 0  # the parent's: 0 for the owner's task, 1 for its sub-task…
    max_depth: int = 2  # DETACH_SUBTASK_DEPTH

    @property
    def cwd(self) -> Path:
        return Path(self.parent.cwd)

    def mode(self, asked: ApprovalMode | None) -> ApprovalMode:
        """The sub-task's mode: the parent's when not asked for; one the parent may not give,
        refused."""
        mode = asked or self.parent.approval_mode
        if mode not in child_modes(self.parent.approval_mode):
            raise UserInputError(
                "subtask.mode_refused",
                mode=mode.value,
                parent=self.parent.approval_mode.value,
                allowed=", ".join(sorted(m.value for m in child_modes(self.parent.approval_mode))),
            )
        return mode

    def worktree(self, asked: bool | None, default: bool) -> bool:
        """A worktree parent's sub-tasks work in worktrees; ``worktree=no`` there is refused."""
        if not self.in_worktree:
            return default if asked is None else asked
        if asked is False:
            raise UserInputError("subtask.worktree_refused")
        return True

    def check(self, asked: str | None) -> str | None:
        """The parent's check: a command the agent names is refused (a check runs with the
        bot's rights; only the owner chooses one)."""
        if asked is not None:
            raise UserInputError("subtask.check_refused")
        return self.parent.check

    def budget(self, asked: float | None) -> float | None:
        """At most what is left of the parent's budget; none left, refused."""
        left = self.budget_left_usd
        if left is None:
            return asked
        if left <= 0.001:
            raise UserInputError("subtask.budget_spent")
        return left if asked is None else min(asked, left)

    def depth_allowed(self) -> None:
        """The parent may start sub-tasks (its own flag says so, and it lies above the
        deepest level)."""
        if not self.parent.subtasks or self.depth >= self.max_depth:
            raise UserInputError("subtask.depth", parent=self.parent.label)

    def child_subtasks(self) -> bool:
        """Whether the sub-task may start its own: only above DETACH_SUBTASK_DEPTH."""
        return self.depth + 1 < self.max_depth


async def depth_of(store: Store, task: Task) -> int:
    """How many ancestors ``task`` has (at most MAX_DEPTH + 1 looked up)."""
    depth, parent_id = 0, task.parent_id
    while parent_id is not None and depth <= MAX_DEPTH:
        parent = await store.tasks.get(parent_id)
        depth, parent_id = depth + 1, parent.parent_id if parent is not None else None
    return depth


async def spent_below(store: Store, task_id: int, levels: int = MAX_DEPTH) -> float:
    """What ``task_id``'s sub-tasks and theirs spent, ``levels`` deep."""
    if levels <= 0:
        return 0.0
    total = 0.0
    for child in await store.tasks.children(task_id):
        total += child.total_cost_usd + await spent_below(store, child.id, levels - 1)
    return total
