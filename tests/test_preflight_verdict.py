"""The preflight's verdict parser and prompt: the model's JSON is hostile input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.errors import PreflightFailed
from bot.models import PreflightDecision, Preset
from bot.preflight.prompt import LISTING_MAX, build_prompt, listing
from bot.preflight.verdict import ANSWER_MAX, QUESTION_MAX, parse_verdict

OPUS = Preset("opus", "claude", "opus", (), 15.0, 75.0, 1.5, 18.75)
SONNET = Preset("sonnet", "claude", "sonnet", (), 3.0, 15.0, 0.3, 3.75)
HAIKU = Preset("haiku", "claude", "haiku", (), 1.0, 5.0, 0.1, 1.25)
UNPRICED = Preset("mystery", "local", "m", priced=False)
OFFERED = (OPUS, SONNET, HAIKU, UNPRICED)


def parse(data: object, default: Preset | None = SONNET):
    return parse_verdict(json.dumps(data), OFFERED, default)


def test_go_with_a_cheaper_preset_and_estimates() -> None:
    verdict = parse(
        {
            "verdict": "go",
            "engine": "claude",
            "preset": "haiku",
            "estimate_usd": 0.4,
            "estimate_minutes": 12,
        }
    )
    assert verdict.decision is PreflightDecision.GO
    assert verdict.preset == HAIKU
    assert (verdict.estimate_usd, verdict.estimate_minutes) == (0.4, 12.0)
    assert verdict.question == "" and verdict.answers == ()


def test_ask_keeps_one_question_and_four_clean_answers() -> None:
    verdict = parse(
        {
            "verdict": "ask",
            "question": "Which\ntests?\u202e",
            "answers": ["unit", "unit", "", "e2e", "all", "lint", "x" * 500],
        }
    )
    assert verdict.decision is PreflightDecision.ASK
    assert verdict.question == "Which tests?"
    assert verdict.answers == ("unit", "e2e", "all", "lint")
    long = parse({"verdict": "ask", "question": "q" * 5000, "answers": ["a" * 500]})
    assert len(long.question) == QUESTION_MAX and long.question.endswith("…")
    assert len(long.answers[0]) == ANSWER_MAX


def test_refuse_needs_its_reason() -> None:
    verdict = parse({"verdict": "refuse", "reason": "It deletes the home directory."})
    assert verdict.reason == "It deletes the home directory."
    with pytest.raises(PreflightFailed):
        parse({"verdict": "refuse"})
    with pytest.raises(PreflightFailed):
        parse({"verdict": "ask", "question": "  "})


@pytest.mark.parametrize(
    "preset, engine",
    [("opus", "claude"), ("gpt-9", "claude"), ("haiku", "codex"), ("mystery", None), (3, None)],
)
def test_a_suggestion_dearer_unknown_or_unpriced_is_ignored(preset: object, engine: object) -> None:
    verdict = parse({"verdict": "go", "preset": preset, "engine": engine})
    assert verdict.decision is PreflightDecision.GO and verdict.preset is None


def test_no_default_keeps_no_suggestion() -> None:
    assert parse({"verdict": "go", "preset": "haiku"}, default=None).preset is None


def test_a_json_fence_is_read() -> None:
    text = '```json\n{"verdict": "go"}\n```'
    assert parse_verdict(text, OFFERED, SONNET).decision is PreflightDecision.GO


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Sure! Here is my verdict: go",
        "[]",
        '"go"',
        '{"verdict": "maybe"}',
        '{"verdict": "GO "}',
        '{"verdict": null}',
        '{"verdict": "ask", "question": ["x"]}',
        '{"verdict": "ask", "question": "q", "answers": "yes"}',
        '{"verdict": "ask", "question": "q", "answers": [1, 2]}',
        '{"verdict": "go", "estimate_usd": "cheap"}',
        '{"verdict": "go", "estimate_usd": -1}',
        '{"verdict": "go", "estimate_usd": true}',
        '{"verdict": "go", "estimate_minutes": NaN}',
        '{"verdict": "go", "estimate_minutes": Infinity}',
        '{"verdict": "go"} {"verdict": "refuse"}',
        "[" * 15_000,
        '{"verdict": "go", "pad": "' + "x" * 20_000 + '"}',
    ],
)
def test_anything_else_is_a_failed_preflight(text: str) -> None:
    with pytest.raises(PreflightFailed):
        parse_verdict(text, OFFERED, SONNET)


def test_huge_estimates_are_capped() -> None:
    verdict = parse({"verdict": "go", "estimate_usd": 1e300, "estimate_minutes": 1e300})
    assert verdict.estimate_usd == 10_000.0
    assert verdict.estimate_minutes == 7 * 24 * 60.0


def test_the_prompt_holds_names_not_contents(tmp_path: Path) -> None:
    work = tmp_path / "shop"
    work.mkdir()
    (work / "secret.txt").write_text("HUNTER2")
    (work / ".env").write_text("TOKEN=1")
    (work / "src").mkdir()
    for n in range(LISTING_MAX + 5):
        (work / f"f{n:03}.py").write_text("")
    names = listing(work)
    assert names[:2] == ("f000.py", "f001.py") and "src/" not in names[: LISTING_MAX - 5]
    assert len(names) == LISTING_MAX + 1 and names[-1] == "… and 7 more"
    prompt = build_prompt("fix the tests", work, names, (SONNET, UNPRICED), 1.5)
    assert "Working directory: shop" in prompt and str(tmp_path) not in prompt
    assert "HUNTER2" not in prompt and ".env" not in prompt
    assert "preset sonnet: USD 3 in / 15 out" in prompt and "preset mystery: price unknown"
    assert "Remaining budget: USD 1.50" in prompt and "<goal>\nfix the tests\n</goal>" in prompt
    assert listing(tmp_path / "missing") == ()
