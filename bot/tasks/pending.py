"""/pending: everything that waits on an owner's tap, each shown again with its own buttons:
the turns' approvals and questions, the budget decisions (``ApprovalAnswers``), and the tasks
a preflight holds (``PreflightDesk``). A copy is edited with its original from then on."""

from __future__ import annotations

from bot.approvals.answers import ApprovalAnswers
from bot.approvals.copies import PendingAsk, waiting_asks
from bot.models import CopyOf
from bot.preflight.desk import PreflightDesk
from bot.store import Store
from bot.telegram.texts import Texts


class PendingAsks:
    def __init__(
        self, store: Store, texts: Texts, answers: ApprovalAnswers, holds: PreflightDesk | None
    ) -> None:
        """``holds``: None when no preflight runs."""
        self._store = store
        self._texts = texts
        self._answers = answers
        self._holds = holds

    async def of(self, user_id: int) -> list[PendingAsk]:
        """What waits on ``user_id``: the turns' questions oldest first, then the holds."""
        asks = await waiting_asks(self._store, self._texts, user_id)
        if self._holds is not None:
            asks += await self._holds.pending(user_id)
        return asks

    async def copied(self, ask: PendingAsk, chat_id: int, row_id: int) -> None:
        """/pending sent a copy of ``ask`` to ``chat_id`` (outbox row ``row_id``)."""
        if ask.of is CopyOf.HOLD and self._holds is not None:
            await self._holds.copied(ask.subject_id, chat_id, row_id)
        elif ask.of is CopyOf.QUESTION:
            await self._answers.copied(ask.subject_id, chat_id, row_id)
