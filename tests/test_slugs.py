"""A task's label carries the words of its goal in any script, never only a nonce."""

from __future__ import annotations

import pytest

from bot.telegram.slugs import given_slug, slugify


@pytest.mark.parametrize(
    ("goal", "slug"),
    [
        ("Fix the login bug!", "fix-login-bug"),
        ("напиши файл rut3k6", "napishi-fayl-rut3k6"),
        ("Пожалуйста, исправь ошибку в логине", "isprav-oshibku-logine"),
        ("Щётка для объявлений", "shchetka-obyavleniy"),
        ("Café crème brûlée", "cafe-creme-brulee"),
        ("写一个文件", "写一个文件"),
        ("!!! ???", "task"),
    ],
)
def test_a_goal_in_any_script_gives_its_words(goal, slug):
    assert slugify(goal) == slug


def test_a_chosen_slug_is_kept_and_a_cyrillic_one_transliterated():
    assert given_slug("tidy-the-readme") == "tidy-the-readme"
    assert given_slug("Поправь README") == "poprav-readme"
