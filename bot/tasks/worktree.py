"""The worktree buttons of a completion card: Show diff, Merge into the base branch, Discard
(with a second, explicit button when the worktree still holds work). A worktree already merged
or discarded, or with nothing to merge, is answered where it was asked (an alert, the board's
toast); a merge git refused is explained in the chat."""

from __future__ import annotations

import html

from bot.errors import UserInputError
from bot.git.worktrees import Worktrees
from bot.models import MessageKind, Task
from bot.redaction import Redactor
from bot.tasks.lookup import TaskLookup
from bot.telegram.callbacks import TaskButton, task_keyboard
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts

INLINE_DIFF_CHARS = 3000
# refusals said where the button was pressed; the others (a conflict, git's) go in the chat
ANSWERED_WHERE_ASKED = frozenset(
    {
        "worktree.none",
        "worktree.already_merged",
        "worktree.already_discarded",
        "worktree.nothing_to_merge",
    }
)


class WorktreeCard:
    def __init__(
        self,
        *,
        lookup: TaskLookup,
        worktrees: Worktrees,
        notifier: Notifier,
        texts: Texts,
        redact: Redactor,
    ) -> None:
        """``redact``: the store's; the agent's patch is redacted before it is escaped (an
        escaped secret would no longer read as the secret)."""
        self._lookup = lookup
        self._worktrees = worktrees
        self._notifier = notifier
        self._texts = texts
        self._redact = redact

    async def show_diff(self, user_id: int, task_id: int) -> None:
        """The diff stat and the patch: inline when short, else as a ``.diff`` file."""
        task = await self._lookup.get_own(user_id, task_id)
        diff = await self._worktrees.diff(task_id)
        loc = task.locale
        if not diff.patch:
            await self._notifier.send(
                task,
                self._texts.get(loc, "worktree.no_changes", label=task.label),
                kind=MessageKind.STATUS,
            )
            return
        header = self._texts.get(loc, "worktree.diff_header", label=task.label)
        stat = html.escape(self._redact(diff.stat[-1500:]))
        patch = self._redact(diff.patch)
        if len(patch) <= INLINE_DIFF_CHARS:
            await self._notifier.send(
                task,
                f"{header}\n<pre>{stat}</pre>\n<pre>{html.escape(patch)}</pre>",
                kind=MessageKind.STATUS,
            )
            return
        await self._notifier.send(task, f"{header}\n<pre>{stat}</pre>", kind=MessageKind.STATUS)
        await self._notifier.send_file(
            task,
            patch.encode(),
            f"{task.id}-{task.slug}.diff",
            self._texts.get(loc, "worktree.diff_file", label=task.label),
        )

    async def merge(self, user_id: int, task_id: int) -> bool:
        """Merged (said on the card), or False: refused, and why said in the chat."""
        task = await self._lookup.get_idle(user_id, task_id)
        loc = task.locale
        try:
            base = await self._worktrees.merge(task_id, f"{task.label}: {task.title[:72]}")
        except UserInputError as exc:  # a refusal belongs in the chat, not a passing alert
            if exc.key in ANSWERED_WHERE_ASKED:
                raise
            await self._notifier.send(
                task, self._texts.get(loc, exc.key, **exc.params), kind=MessageKind.STATUS
            )
            return False
        await self._said_on_card(
            task, self._texts.get(loc, "worktree.merged", label=task.label, base=base)
        )
        return True

    async def discard(self, user_id: int, task_id: int, confirmed: bool) -> bool:
        """Discarded (said on the card), or False: it holds work, and a confirmation is asked."""
        task = await self._lookup.get_idle(user_id, task_id)
        loc = task.locale
        if await self._worktrees.discard(task_id, confirmed):
            await self._said_on_card(
                task, self._texts.get(loc, "worktree.discarded", label=task.label)
            )
            return True
        asked = self._texts.get(loc, "worktree.confirm_discard", label=task.label)
        pr = await self._worktrees.pull_request(task.id)
        if pr is not None:  # its branch lives on remotely: say that the PR stays
            asked += "\n" + self._texts.get(
                loc, "worktree.discard_keeps_pr", number=pr[0], url=pr[1]
            )
        await self._notifier.send(
            task,
            asked,
            kind=MessageKind.STATUS,
            markup=task_keyboard(
                self._texts, loc, task.id, [TaskButton.DISCARD_YES, TaskButton.DIFF]
            ),
        )
        return False

    async def _said_on_card(self, task: Task, text: str) -> None:
        """What happened, on the task's newest card, whose worktree buttons go; a new line in
        the chat only when the task has no card."""
        if not await self._notifier.buttons_follow(task, text):
            await self._notifier.send(task, text, kind=MessageKind.STATUS)
