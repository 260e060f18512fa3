"""Every locale has every message, with the same placeholders, and renders."""

from __future__ import annotations

import string
import tomllib

import pytest

from bot.texts import LOCALES_DIR, Texts, _flatten


def catalog(name: str) -> dict[str, str]:
    flat: dict[str, str] = {}
    _flatten("", tomllib.loads((LOCALES_DIR / f"{name}.toml").read_text()), flat)
    return flat


def fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


LOCALES = Texts().locales


def test_there_are_at_least_english_and_russian():
    assert {"en", "ru"} <= set(LOCALES)


@pytest.mark.parametrize("locale", [loc for loc in LOCALES if loc != "en"])
def test_every_locale_has_every_message_with_the_same_placeholders(locale):
    english, other = catalog("en"), catalog(locale)
    assert set(english) - set(other) == set(), "missing"
    assert set(other) - set(english) == set(), "unknown keys"
    for key, template in english.items():
        assert fields(other[key]) == fields(template), key


@pytest.mark.parametrize("locale", LOCALES)
def test_every_message_renders(locale):
    texts = Texts()
    for key, template in catalog(locale).items():
        texts.get(locale, key, **{f: "x" for f in fields(template)})
