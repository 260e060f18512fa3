"""The ``detach`` command's words in its terminal's language: the locale from ``LC_ALL``, else
``LC_MESSAGES``, else ``LANG`` (``ru*``: Russian, anything else English), said from the chat's
catalogs as plain text; numbers and moments as that language writes them (Babel)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import datetime

from bot.models import Phrase
from bot.telegram.render import plain
from bot.telegram.texts import DEFAULT_LOCALE, Texts

LOCALE_VARIABLES = ("LC_ALL", "LC_MESSAGES", "LANG")  # POSIX: the first one set decides


def terminal_locale(environ: Mapping[str, str]) -> str:
    """The catalog a terminal with ``environ`` reads: ``ru`` for a Russian locale, else English."""
    for name in LOCALE_VARIABLES:
        value = environ.get(name, "")
        if value:
            return "ru" if value.lower().startswith("ru") else DEFAULT_LOCALE
    return DEFAULT_LOCALE


@functools.cache
def _texts() -> Texts:
    return Texts()  # the catalogs are read once a process has something to say


class TerminalTexts:
    """What the shell prints, in one locale (``terminal_locale``), as plain text."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.locale = terminal_locale(environ)
        self.texts = _texts()

    def __call__(self, key: str, **params: object) -> str:
        """The message ``key`` with ``params`` (a param may be a Phrase, said here too)."""
        return self.say(Phrase(key, params))

    def say(self, words: Phrase | str) -> str:
        """A phrase (or a plain string, as it is) for the terminal."""
        return plain(self.texts.say(self.locale, words))

    def plural(self, key: str, n: int, **params: object) -> str:
        return self.say(Phrase(key, params, count=n))

    def moment(self, at: datetime) -> str:
        """A moment as the language writes it (``Sun 6 Dec 18:30``, ``вс 6 дек. 18:30``)."""
        return self.texts.moment(self.locale, at)

    def decimal(self, value: float, digits: int = 1) -> str:
        """A number with ``digits`` decimals in the language's way (``1.5``, ``1,5``)."""
        from babel.numbers import format_decimal  # its locale data: only once a number is shown

        pattern = "0." + "0" * digits if digits else "0"
        return format_decimal(value, format=pattern, locale=self.locale)
