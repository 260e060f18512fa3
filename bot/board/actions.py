"""What the board's buttons do, through the same objects as Telegram's: an approval or a question
is answered by ``ApprovalAnswers`` (first answer wins, the Telegram message is edited the same
way), a follow-up is queued and Cancel, Merge and Discard go through the task service and the
worktree card, so the chat tells of each as if it had been tapped there."""

from __future__ import annotations

from dataclasses import dataclass

from bot.approvals.answers import ApprovalAnswers
from bot.approvals.view import ApprovalChoice
from bot.errors import UserInputError
from bot.models import MessageKind, Task, Turn
from bot.tasks.service import TaskService
from bot.telegram.callbacks import task_keyboard
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts
from bot.worktrees.card import WorktreeCard

# the page's buttons; the page itself confirms "always" before it sends it
BOARD_CHOICES = frozenset({ApprovalChoice.ALLOW, ApprovalChoice.DENY, ApprovalChoice.ALWAYS})


@dataclass(frozen=True, slots=True, kw_only=True)
class BoardActions:
    answers: ApprovalAnswers
    tasks: TaskService
    worktree_card: WorktreeCard
    notifier: Notifier
    texts: Texts

    async def approve(self, user_id: int, qid: int, choice: ApprovalChoice) -> str:
        """The locale key of the outcome; raises UserInputError (stale, answered, not yours,
        or a choice the page does not offer)."""
        if choice not in BOARD_CHOICES:
            raise UserInputError("callback.stale")
        if choice is ApprovalChoice.ALWAYS:  # confirmed on the page already
            choice = ApprovalChoice.CONFIRM
        return await self.answers.on_approval(user_id, qid, choice)

    async def pick(self, user_id: int, qid: int, option: int) -> str:
        return await self.answers.on_option(user_id, qid, option)

    async def follow_up(self, user_id: int, task_id: int, prompt: str) -> Turn:
        """The task's next turn, after the running one; the chat hears of it."""
        task = await self.tasks.get_own(user_id, task_id)
        prompt = self.tasks.validate_prompt(prompt, "detach")
        await self.tasks.money.check_daily_cap(user_id)

        async def say(turn: Turn) -> None:
            await self._say(task, turn)

        return await self.tasks.queue_turn(task, user_id, prompt, "follow_up", say)

    async def _say(self, task: Task, turn: Turn) -> None:
        text = self.texts.get(task.locale, "board.followup", label=task.label)
        markup = task_keyboard(self.texts, task.locale, task.id, ["cancel"])
        await self.notifier.send(task, text, kind=MessageKind.STATUS, markup=markup)

    async def hold(self, user_id: int, hold_id: int, choice: int) -> str:
        """A held task's choice (a suggested answer, Start anyway, Drop), answered by the same
        desk as its buttons in the chat; the locale key of the outcome."""
        step = self.tasks.preflight
        return await step.tap(user_id, hold_id, choice) if step is not None else "preflight.gone"

    async def cancel(self, user_id: int, task_id: int) -> Task:
        return await self.tasks.cancel(user_id, task_id)

    async def merge(self, user_id: int, task_id: int) -> bool:
        return await self.worktree_card.merge(user_id, task_id)

    async def discard(self, user_id: int, task_id: int, confirmed: bool) -> bool:
        if not confirmed:
            raise UserInputError("board.discard_unconfirmed")
        return await self.worktree_card.discard(user_id, task_id, True)
