"""User-facing text: gettext catalogs ``locales/<lang>/LC_MESSAGES/detach.po``, compiled to
``.mo`` by ``make`` and read with aiogram's I18n. Message ids are stable keys (``task.done``);
the locale is always passed explicitly, so background notifications use the recipient's."""

from __future__ import annotations

import html
from enum import StrEnum
from pathlib import Path
from typing import Any

from aiogram.utils.i18n import I18n

from bot.errors import ConfigError
from bot.models import TurnError
from bot.telegram.render import plain

DEFAULT_LOCALE = "en"
DOMAIN = "detach"
LOCALES_DIR = Path(__file__).resolve().parents[2] / "locales"


def catalog_files(directory: Path = LOCALES_DIR) -> dict[str, Path]:
    """The ``.po`` source of every locale, by locale."""
    return {
        po.parent.parent.name: po for po in sorted(directory.glob(f"*/LC_MESSAGES/{DOMAIN}.po"))
    }


class Texts:
    """Catalogs by locale; missing keys fall back to English, unknown locales to English."""

    def __init__(self, directory: Path = LOCALES_DIR) -> None:
        for locale, po in catalog_files(directory).items():
            mo = po.with_suffix(".mo")
            if not mo.exists() or mo.stat().st_mtime < po.stat().st_mtime:
                raise ConfigError(
                    f"the {locale} messages are not compiled (or older than {po}); "
                    "run `make venv` (it runs pybabel compile)"
                )
        self.i18n = I18n(path=directory, default_locale=DEFAULT_LOCALE, domain=DOMAIN)
        if DEFAULT_LOCALE not in self.i18n.available_locales:
            raise ConfigError(f"no {DEFAULT_LOCALE} messages in {directory}")

    @property
    def locales(self) -> list[str]:
        return sorted(self.i18n.available_locales)

    def pick(self, language_code: str | None) -> str:
        base = (language_code or "").split("-")[0].lower()
        return base if base in self.i18n.available_locales else DEFAULT_LOCALE

    def template(self, locale: str, key: str) -> str:
        text = self.i18n.gettext(key, locale=locale)
        if text == key and locale != DEFAULT_LOCALE:
            text = self.i18n.gettext(key, locale=DEFAULT_LOCALE)
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
        plural_key = f"{key}.plural"
        text = self.i18n.gettext(key, plural_key, n, locale=locale)
        if text in (key, plural_key) and locale != DEFAULT_LOCALE:
            text = self.i18n.gettext(key, plural_key, n, locale=DEFAULT_LOCALE)
        if text in (key, plural_key):
            raise KeyError(f"no message {key!r}")
        safe = {
            k: html.escape(v, quote=False) if isinstance(v, str) else v for k, v in params.items()
        }
        return text.format(n=n, **safe)

    def error(self, locale: str, error: TurnError | None) -> str:
        """Why a turn did not succeed, in plain text (it goes into other texts as a param)."""
        if error is None:
            return self.get(locale, "turn_error.unknown")
        return plain(self.get(locale, error.key, **error.params))

    def status(self, locale: str, status: StrEnum) -> str:
        return self.get(locale, f"status.{status.value}")

    def raw(self, locale: str, key: str, **params: Any) -> str:
        """Like ``get`` for params that are already HTML."""
        return self.template(locale, key).format(**params)
