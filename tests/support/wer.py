"""Word error rate: the word-level edit distance (substitutions, deletions, insertions) from
what was said to what was heard, over the number of words said, both normalised the same way
(case, punctuation, ё as е, hyphens and apostrophes as spaces)."""

from __future__ import annotations

import re
import unicodedata

_NOT_WORD = re.compile(r"[^\w]+")


def words(text: str) -> list[str]:
    """``text`` as the words compared: lower case, no punctuation, ё read as е."""
    folded = unicodedata.normalize("NFKC", text).casefold().replace("ё", "е")
    return [w for w in _NOT_WORD.sub(" ", folded.replace("_", " ")).split() if w]


def distance(said: list[str], heard: list[str]) -> int:
    """The fewest word substitutions, deletions and insertions turning ``said`` into ``heard``."""
    previous = list(range(len(heard) + 1))
    for i, word in enumerate(said, 1):
        current = [i]
        for j, other in enumerate(heard, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other))
            )
        previous = current
    return previous[-1]


def wer(said: str, heard: str) -> float:
    """Word error rate of ``heard`` against ``said`` (0 is perfect; above 1 when the recognizer
    adds more words than were said). ``said`` must hold a word."""
    reference = words(said)
    if not reference:
        raise ValueError("nothing was said")
    return distance(reference, words(heard)) / len(reference)


def corpus_wer(pairs: list[tuple[str, str]]) -> float:
    """The errors of all ``(said, heard)`` pairs over all the words said (not a mean of rates)."""
    errors = sum(distance(words(s), words(h)) for s, h in pairs)
    return errors / sum(len(words(s)) for s, _ in pairs)
