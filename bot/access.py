"""Who may use the bot: the allow-list, and the once-per-user refusal for everyone else."""

from __future__ import annotations

import logging

from bot.store import Store

log = logging.getLogger(__name__)


class AccessPolicy:
    def __init__(self, allowed_users: frozenset[int], store: Store) -> None:
        self._allowed = allowed_users
        self._store = store
        self._refused: set[int] = set()

    def is_allowed(self, user_id: int) -> bool:
        return user_id in self._allowed

    async def refuse(self, user_id: int) -> bool:
        """Audit a refused update; True when this user should get the one polite refusal."""
        log.info("refused an update from user %s", user_id)
        await self._store.audit.record("access_refused", user_id)
        if user_id in self._refused:
            return False
        self._refused.add(user_id)
        if await self._store.audit.count("refusal_sent", user_id):
            return False
        await self._store.audit.record("refusal_sent", user_id)
        return True
