"""User-facing text: gettext catalogs ``locales/<lang>/LC_MESSAGES/detach.po``, compiled to
``.mo`` by ``make`` and read with the standard library's gettext (aiogram's I18n middleware, in
the handlers, reads the same files). Message ids are stable keys (``task.done``);
the locale is always passed explicitly, so background notifications use the recipient's."""

from __future__ import annotations

import functools
import gettext
import html
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from bot.errors import ConfigError
from bot.models import Phrase, TurnError, WaitState
from bot.telegram.render import plain

DEFAULT_LOCALE = "en"
DOMAIN = "detach"
LOCALES_DIR = Path(__file__).resolve().parents[2] / "locales"


def catalog_files(directory: Path = LOCALES_DIR) -> dict[str, Path]:
    """The ``.po`` source of every locale, by locale."""
    return {
        po.parent.parent.name: po for po in sorted(directory.glob(f"*/LC_MESSAGES/{DOMAIN}.po"))
    }


@functools.lru_cache(maxsize=4)
def _read(compiled: tuple[tuple[str, Path, int, int], ...]) -> dict[str, gettext.GNUTranslations]:
    """The ``.mo`` files (locale, path, mtime, size) read once while they stay the same: the
    shell's words, the bot's and aiogram's I18n are one copy (about 0.45 MB each here)."""
    catalogs = {}
    for locale, mo, _mtime, _size in compiled:
        with mo.open("rb") as file:
            catalogs[locale] = gettext.GNUTranslations(file)
    return catalogs


class Texts:
    """Catalogs by locale; missing keys fall back to English, unknown locales to English."""

    def __init__(self, directory: Path = LOCALES_DIR) -> None:
        compiled: list[tuple[str, Path, int, int]] = []
        for locale, po in catalog_files(directory).items():
            mo = po.with_suffix(".mo")
            if not mo.exists() or mo.stat().st_mtime < po.stat().st_mtime:
                raise ConfigError(
                    f"the {locale} messages are not compiled (or older than {po}); "
                    "run `make venv` (it runs pybabel compile)"
                )
            stat = mo.stat()
            compiled.append((locale, mo, stat.st_mtime_ns, stat.st_size))
        self.directory = directory
        self._catalogs = dict(_read(tuple(compiled)))
        if DEFAULT_LOCALE not in self._catalogs:
            raise ConfigError(f"no {DEFAULT_LOCALE} messages in {directory}")

    @property
    def catalogs(self) -> dict[str, gettext.GNUTranslations]:
        """The compiled catalogs by locale (aiogram's I18n reads the same)."""
        return dict(self._catalogs)

    @property
    def locales(self) -> list[str]:
        return sorted(self._catalogs)

    def pick(self, language_code: str | None) -> str:
        base = (language_code or "").split("-")[0].lower()
        return base if base in self._catalogs else DEFAULT_LOCALE

    def _gettext(self, locale: str, key: str, plural: str | None = None, n: int = 1) -> str:
        catalog = self._catalogs.get(locale)
        if catalog is None:
            return key if n == 1 or plural is None else plural
        return catalog.gettext(key) if plural is None else catalog.ngettext(key, plural, n)

    def template(self, locale: str, key: str) -> str:
        text = self._gettext(locale, key)
        if text == key and locale != DEFAULT_LOCALE:
            text = self._gettext(DEFAULT_LOCALE, key)
        if text == key:
            raise KeyError(f"no message {key!r}")
        return text

    def get(self, locale: str, key: str, **params: Any) -> str:
        """The text for ``key``; string params are HTML-escaped (texts are Telegram HTML)."""
        safe = {
            k: html.escape(v, quote=False) if isinstance(v, str) else v for k, v in params.items()
        }
        return self.template(locale, key).format(**safe)

    def plural(self, locale: str, key: str, n: int, **params: Any) -> str:
        """A count in the language's plural form (gettext ``msgid_plural`` ``<key>.plural``):
        "1 step", "2 steps"; "1 шаг", "3 шага", "5 шагов". ``{n}`` is the count."""
        safe = {
            k: html.escape(v, quote=False) if isinstance(v, str) else v for k, v in params.items()
        }
        return self._plural_template(locale, key, n).format(n=n, **safe)

    def _plural_template(self, locale: str, key: str, n: int) -> str:
        plural_key = f"{key}.plural"
        text = self._gettext(locale, key, plural_key, n)
        if text in (key, plural_key) and locale != DEFAULT_LOCALE:
            text = self._gettext(DEFAULT_LOCALE, key, plural_key, n)
        if text in (key, plural_key):
            raise KeyError(f"no message {key!r}")
        return text

    def say(self, locale: str, words: Phrase | str) -> str:
        """A phrase in ``locale`` (Telegram HTML); a plain string is said as it is, escaped."""
        if isinstance(words, str):
            return html.escape(words, quote=False)
        params = {k: self._said(locale, v) for k, v in words.params.items()}
        if words.count is None:
            return self.raw(locale, words.key, **params)
        return self._plural_template(locale, words.key, words.count).format(n=words.count, **params)

    def _said(self, locale: str, param: object) -> object:
        if isinstance(param, Phrase | str):
            return self.say(locale, param)
        if isinstance(param, tuple):
            return ", ".join(str(self._said(locale, p)) for p in param)
        if isinstance(param, list):  # one a line
            return "\n".join(str(self._said(locale, p)) for p in param)
        return param

    def error(self, locale: str, error: TurnError | None) -> str:
        """Why a turn did not succeed, in plain text (it goes into other texts as a param)."""
        if error is None:
            return self.get(locale, "turn_error.unknown")
        return plain(self.get(locale, error.key, **error.params))

    def status(self, locale: str, status: StrEnum) -> str:
        return self.get(locale, f"status.{status.value}")

    def wait(self, locale: str, wait: WaitState) -> str:
        """The one name of what a task waits for, on every surface."""
        return self.get(locale, f"wait.{wait.value}")

    def moment(self, locale: str, at: datetime) -> str:
        """A moment in its own zone as the language writes it (Babel, CLDR): ``Sun 6 Dec 18:30``,
        ``вс 6 дек. 18:30``."""
        from babel.dates import format_datetime  # its locale data: only once a date is shown

        return format_datetime(at, "EEE d MMM HH:mm", locale=locale)

    def raw(self, locale: str, key: str, **params: Any) -> str:
        """Like ``get`` for params that are already HTML."""
        return self.template(locale, key).format(**params)
