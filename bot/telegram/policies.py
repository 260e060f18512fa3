"""The chats' /notify policies: which task messages make the phone buzz."""

from __future__ import annotations

import time

from bot.models import MessageKind, NotifyPolicy
from bot.store import Store

# what needs the person: these notify under the default policy (``done``)
LOUD_KINDS = frozenset(
    {
        MessageKind.RESULT,
        MessageKind.APPROVAL,
        MessageKind.QUESTION,
        MessageKind.BUDGET,
        MessageKind.INTERRUPTED,
        MessageKind.LIMIT,
        MessageKind.CANCEL,
    }
)
TTL_S = 30.0


class ChatPolicies:
    """Read through a short cache: every task message asks, and a chat's choice changes
    rarely. A change made here applies at once; one made by another process (a worker of a
    scale-out setup asks too) within ``TTL_S``."""

    def __init__(self, store: Store, ttl_s: float = TTL_S) -> None:
        self._store = store
        self._ttl_s = ttl_s
        self._known: dict[int, tuple[NotifyPolicy, float]] = {}

    async def get(self, chat_id: int) -> NotifyPolicy:
        known = self._known.get(chat_id)
        if known is not None and time.monotonic() - known[1] < self._ttl_s:
            return known[0]
        stored = await self._store.chats.notify(chat_id)
        policy = NotifyPolicy(stored) if stored else NotifyPolicy.DONE
        self._known[chat_id] = (policy, time.monotonic())
        return policy

    async def set(self, chat_id: int, policy: NotifyPolicy) -> None:
        await self._store.chats.set_notify(chat_id, policy.value)
        self._known[chat_id] = (policy, time.monotonic())

    async def silent(self, chat_id: int, kind: MessageKind, follow_on: bool = False) -> bool:
        """Whether a message of ``kind`` goes without a buzz: by default only what needs the
        person (approvals, questions, the card, a restart's notice) notifies, and a
        ``follow_on`` (the second part of a long answer, its file) never does: the first
        part buzzed for it."""
        policy = await self.get(chat_id)
        if policy is NotifyPolicy.ALL:
            return False
        return policy is NotifyPolicy.QUIET or follow_on or kind not in LOUD_KINDS
