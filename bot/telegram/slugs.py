"""A task's slug, the words of its label (``#16 napishi-fayl``): made from a goal in any
script. Cyrillic is transliterated (the slug names a worktree and files, so ASCII reads best
there); accents are dropped; letters of other scripts are kept as they are."""

from __future__ import annotations

import re
import unicodedata

_STOPWORDS = {
    *("the", "a", "an", "and", "or", "to", "of", "in", "on", "for", "please", "with"),
    *("i", "v", "vo", "na", "s", "k", "po", "dlya", "pozhaluysta"),  # и, в, на, для, пожалуйста
}
_CYRILLIC = {  # ъ and ь leave no letter
    **dict(zip("абвгдезийклмнопрстуфыэіґў", "abvgdeziyklmnoprstufyeigu", strict=True)),
    **{"ё": "e", "ж": "zh", "х": "kh", "ц": "ts", "ч": "ch", "ш": "sh", "щ": "shch"},
    **{"ъ": "", "ь": "", "ю": "yu", "я": "ya", "ї": "yi", "є": "ye"},
}
_LATIN = str.maketrans(_CYRILLIC)


def slugify(text: str, max_words: int = 3, max_chars: int = 24) -> str:
    """``Fix the login bug!`` -> ``fix-login-bug``, ``напиши файл`` -> ``napishi-fayl``;
    ``task`` when nothing usable is left."""
    latin = unicodedata.normalize("NFKD", text.lower().translate(_LATIN))
    bare = "".join(c for c in latin if not unicodedata.combining(c))
    words = [w for w in re.findall(r"[^\W_]+", bare) if w not in _STOPWORDS]
    slug = "-".join(words[:max_words])[:max_chars].strip("-")
    return slug or "task"


def given_slug(text: str) -> str:
    """A slug someone chose (a task file's ``slug:``) kept as it is when it is one, else made
    from it like any other."""
    text = text.strip().lower()
    return text if re.fullmatch(r"[a-z0-9][a-z0-9-]{0,39}", text) else slugify(text)
