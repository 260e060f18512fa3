"""The word error rate the voice benchmark (bench/voice_wer.py) and the offline voice tests
use: an edit distance over normalised words, counted against the words said."""

from __future__ import annotations

import pytest

from tests.support.wer import corpus_wer, distance, wer, words


def test_words_are_compared_without_case_punctuation_or_yo():
    assert words("Write a short summary, of the meeting-notes!") == [
        "write", "a", "short", "summary", "of", "the", "meeting", "notes",
    ]  # fmt: skip
    assert words("Ещё  ЁЛКА?") == ["еще", "елка"]


def test_the_distance_counts_substitutions_deletions_and_insertions():
    said = ["fix", "the", "failing", "test"]
    assert distance(said, said) == 0
    assert distance(said, ["fix", "the", "failling", "test"]) == 1  # one substituted
    assert distance(said, ["fix", "failing", "test"]) == 1  # one deleted
    assert distance(said, ["fix", "the", "failing", "unit", "test"]) == 1  # one inserted
    assert distance(said, []) == 4 and distance([], said) == 4
    assert distance(["a", "b", "c"], ["c", "b", "a"]) == 2  # not a bag of words


def test_the_rate_is_errors_over_the_words_said():
    said = "write a short summary of the meeting notes"
    assert wer(said, "Write a short summary of the meeting notes.") == 0.0
    # the example: 6 of the 8 words said were lost or misheard
    assert wer(said, "right up short summary oddly old") == pytest.approx(6 / 8)
    assert wer("stop", "please stop it now") == 3.0  # insertions can pass 1
    with pytest.raises(ValueError):
        wer("", "anything")


def test_a_corpus_rate_weighs_each_phrase_by_its_words():
    pairs = [("one two three four", "one two three four"), ("stop", "go")]
    assert corpus_wer(pairs) == pytest.approx(1 / 5)  # not the mean of 0 and 1
