"""Every locale has every message, with the same placeholders, and renders; the compiled
catalogs aiogram's I18n reads are those of the .po sources."""

from __future__ import annotations

import string

import pytest
from babel.messages.pofile import read_po

from bot.telegram.texts import Texts, catalog_files

SOURCES = catalog_files()


def catalog(name: str) -> dict[str, str]:
    """Singular messages by key."""
    with SOURCES[name].open("rb") as f:
        return {m.id: m.string for m in read_po(f) if m.id and not m.pluralizable}


def plurals(name: str) -> dict[str, tuple[str, ...]]:
    """Messages with plural forms (``msgid_plural``), by key: every form of the language."""
    with SOURCES[name].open("rb") as f:
        return {m.id[0]: tuple(m.string) for m in read_po(f) if m.pluralizable}


def fields(template: str) -> set[str]:
    return {f for _, f, _, _ in string.Formatter().parse(template) if f}


LOCALES = Texts().locales


def test_there_are_at_least_english_and_russian():
    assert {"en", "ru"} <= set(LOCALES)
    assert set(LOCALES) == set(SOURCES), "every .po is compiled and loaded"


@pytest.mark.parametrize("locale", LOCALES)
def test_no_message_is_empty_or_fuzzy(locale):
    with SOURCES[locale].open("rb") as f:
        messages = [m for m in read_po(f) if m.id]
    assert messages
    assert [m.id for m in messages if not m.string] == []
    assert [m.id for m in messages if m.fuzzy] == []


@pytest.mark.parametrize("locale", [loc for loc in LOCALES if loc != "en"])
def test_every_locale_has_every_message_with_the_same_placeholders(locale):
    english, other = catalog("en"), catalog(locale)
    assert set(english) - set(other) == set(), "missing"
    assert set(other) - set(english) == set(), "unknown keys"
    for key, template in english.items():
        assert fields(other[key]) == fields(template), key
    english_plurals, other_plurals = plurals("en"), plurals(locale)
    assert set(english_plurals) == set(other_plurals)
    for key, forms in other_plurals.items():
        assert all(form and fields(form) == fields(english_plurals[key][0]) for form in forms), key


@pytest.mark.parametrize("locale", LOCALES)
def test_every_message_renders_from_the_compiled_catalog(locale):
    texts = Texts()
    for key, template in catalog(locale).items():
        assert texts.template(locale, key) == template, f"{key}: .mo is stale"
        texts.get(locale, key, **{f: "x" for f in fields(template)})


def test_counts_take_each_language_s_plural_forms():
    texts = Texts()
    assert [texts.plural("en", "progress.steps", n) for n in (1, 2)] == ["1 step", "2 steps"]
    assert [texts.plural("ru", "progress.steps", n) for n in (1, 3, 5, 21, 12)] == [
        "1 шаг",
        "3 шага",
        "5 шагов",
        "21 шаг",
        "12 шагов",
    ]
    assert plurals("ru")["progress.steps"] and len(plurals("ru")["progress.steps"]) == 3


def test_an_unknown_locale_falls_back_to_english_and_an_unknown_key_is_an_error():
    texts = Texts()
    assert texts.get("xx", "status.done") == texts.get("en", "status.done")
    assert texts.pick("ru-RU") == "ru" and texts.pick("pt-BR") == "en" and texts.pick(None) == "en"
    with pytest.raises(KeyError):
        texts.get("en", "no.such.key")
