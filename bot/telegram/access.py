"""Who may use the bot: the allow-list, and the once-per-user refusal for everyone else."""

from __future__ import annotations

import logging

from bot.errors import UserInputError
from bot.store import Store
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)


class AccessPolicy:
    """Also holds each user's /lang choice (read once, then kept in memory)."""

    def __init__(self, allowed_users: frozenset[int], store: Store, texts: Texts) -> None:
        self._allowed = allowed_users
        self._store = store
        self._texts = texts
        self._refused: set[int] = set()
        self._locales: dict[int, str] | None = None

    async def locale(self, user_id: int, language_code: str | None) -> str:
        """The user's /lang choice, else their Telegram language if we have it, else English."""
        if self._locales is None:
            self._locales = await self._store.users.locales()
        return self._locales.get(user_id) or self._texts.pick(language_code)

    async def set_locale(self, user_id: int, lang: str) -> str:
        locale = lang.strip().lower()
        if locale not in self._texts.locales:
            raise UserInputError("error.bad_lang", lang=lang, known=", ".join(self._texts.locales))
        await self._store.users.set_locale(user_id, locale)
        if self._locales is not None:
            self._locales[user_id] = locale
        return locale

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
