"""User-facing text from ``locales/<lang>.toml``; the locale is always passed explicitly."""

from __future__ import annotations

import html
import tomllib
from enum import StrEnum
from pathlib import Path
from typing import Any

DEFAULT_LOCALE = "en"
LOCALES_DIR = Path(__file__).resolve().parent.parent / "locales"


def _flatten(prefix: str, table: dict[str, Any], out: dict[str, str]) -> None:
    for key, value in table.items():
        name = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            _flatten(name, value, out)
        else:
            out[name] = str(value)


class Texts:
    """Catalogs by locale; missing keys fall back to English, unknown locales to English."""

    def __init__(self, directory: Path = LOCALES_DIR) -> None:
        self._catalogs: dict[str, dict[str, str]] = {}
        for path in sorted(directory.glob("*.toml")):
            flat: dict[str, str] = {}
            _flatten("", tomllib.loads(path.read_text(encoding="utf-8")), flat)
            self._catalogs[path.stem] = flat

    @property
    def locales(self) -> list[str]:
        return sorted(self._catalogs)

    def pick(self, language_code: str | None) -> str:
        base = (language_code or "").split("-")[0].lower()
        return base if base in self._catalogs else DEFAULT_LOCALE

    def get(self, locale: str, key: str, **params: Any) -> str:
        """The text for ``key``; string params are HTML-escaped (texts are Telegram HTML)."""
        template = self._catalogs.get(locale, {}).get(key) or self._catalogs[DEFAULT_LOCALE][key]
        safe = {k: html.escape(v, quote=False) if isinstance(v, str) else v
                for k, v in params.items()}
        return template.format(**safe)

    def status(self, locale: str, status: StrEnum) -> str:
        return self.get(locale, f"status.{status.value}")

    def raw(self, locale: str, key: str, **params: Any) -> str:
        """Like ``get`` for params that are already HTML."""
        template = self._catalogs.get(locale, {}).get(key) or self._catalogs[DEFAULT_LOCALE][key]
        return template.format(**params)
