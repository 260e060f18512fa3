"""A task's life after Merge or Discard: its next turn (whichever door it came in by) finds its
worktree cut again at the same path, on the same branch, so the agent's session (which Claude
Code resumes only in the same directory) and the card's terminal line stay true. After a Merge
it is cut from the branch it was merged into, as that branch is now; after a Discard, from the
commit it had started at. The chat is told in one line."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from bot.git.worktrees import Worktrees
from bot.models import MessageKind, Task
from bot.ports import TreeState
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts


class Revival:
    """``bot.ports.TaskWorktrees`` for the turns (wired by the composition root)."""

    def __init__(self, worktrees: Worktrees, notifier: Notifier, texts: Texts) -> None:
        self._worktrees = worktrees
        self._notifier = notifier
        self._texts = texts

    async def reopen(self, task: Task) -> None:
        was = await self._worktrees.reopen(task.id)
        if was is None:
            return
        text = self._texts.get(
            task.locale,
            f"worktree.reopened_{was.state}",
            label=task.label,
            base=was.base_branch,
            commit=was.base_commit[:10],
        )
        await self._notifier.send(task, text, kind=MessageKind.STATUS)

    async def offers(
        self, task_id: int, seen: Callable[[], Awaitable[TreeState | None]] | None = None
    ) -> bool:
        return await self._worktrees.offers(task_id, seen)
