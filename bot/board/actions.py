"""What the board's buttons do, through the same use cases as Telegram's: an approval or a question
is answered by ``ApprovalAnswers`` (first answer wins, the Telegram message is edited the same
way), a follow-up goes through ``FollowUps`` like a reply, a held task's choice through its
preflight step, Cancel, Merge and Discard through the task's lifecycle and the worktree card,
and Push and Open PR through ``bot.prs``, so the chat tells of each as if it had been tapped
there."""

from __future__ import annotations

from dataclasses import dataclass

from bot.approvals.answers import ApprovalAnswers
from bot.errors import UserInputError
from bot.models import ApprovalAnswer, FollowUpDoor, Task
from bot.prs.desk import PullRequests
from bot.tasks.followup import FollowedUp, FollowUp
from bot.tasks.usecases import UseCases


@dataclass(frozen=True, slots=True, kw_only=True)
class BoardActions:
    answers: ApprovalAnswers
    uses: UseCases
    prs: PullRequests | None = None  # ⬆️ Push and Open PR

    async def approve(self, user_id: int, qid: int, answer: ApprovalAnswer) -> str:
        """The locale key of the outcome; raises UserInputError (stale, answered, not yours,
        or no answer of the owner's). The page showed the rule before it sends ``ALWAYS``."""
        return await self.answers.give(user_id, qid, answer)

    async def pick(self, user_id: int, qid: int, option: int) -> str:
        return await self.answers.on_option(user_id, qid, option)

    async def follow_up(
        self, user_id: int, task_id: int, prompt: str, steer: bool | None
    ) -> FollowedUp:
        """As a reply in the chat (``bot.tasks.followup``); ``steer``: the page's Steer now
        (True) or Queue (False) while a turn runs."""
        asked = FollowUp(
            user_id=user_id, task_id=task_id, prompt=prompt, door=FollowUpDoor.BOARD, steer=steer
        )
        done = await self.uses.follow_up.follow_up(asked)
        assert done is not None  # it answers no message: never a repeat
        return done

    async def hold(self, user_id: int, hold_id: int, choice: int) -> str:
        """A held task's choice (a suggested answer, Start anyway, Drop), answered by the same
        desk as its buttons in the chat; the locale key of the outcome."""
        step = self.uses.preflight
        return await step.tap(user_id, hold_id, choice) if step is not None else "preflight.gone"

    async def cancel(self, user_id: int, task_id: int) -> Task:
        return await self.uses.lifecycle.cancel(user_id, task_id)

    async def merge(self, user_id: int, task_id: int) -> bool:
        return await self.uses.worktree_card.merge(user_id, task_id)

    async def discard(self, user_id: int, task_id: int, confirmed: bool) -> bool:
        if not confirmed:
            raise UserInputError("board.discard_unconfirmed")
        return await self.uses.worktree_card.discard(user_id, task_id, True)

    async def push(self, user_id: int, task_id: int) -> bool:
        if self.prs is None:
            raise UserInputError("board.no_prs")
        return await self.prs.push(user_id, task_id)

    async def open_pr(self, user_id: int, task_id: int) -> bool:
        if self.prs is None:
            raise UserInputError("board.no_prs")
        return await self.prs.open(user_id, task_id)
