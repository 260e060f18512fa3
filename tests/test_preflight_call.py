"""The preflight's call through the real claude CLI against the scripted Anthropic mock: no
tools, its cost, and a model that hangs or answers garbage costs the task no more than the
timeout."""

from __future__ import annotations

import json
import time
from pathlib import Path

from bot.models import PreflightDecision, Preset
from bot.preflight.call import ClaudePreflight
from bot.preflight.check import Preflight
from executors.process import agent_env
from tests.support.anthropic_mock import AnthropicMock

HAIKU = Preset("haiku", "claude", "haiku", (), 1.0, 5.0, 0.1, 1.25)
SONNET = Preset("sonnet", "claude", "sonnet", (), 3.0, 15.0, 0.3, 3.75)


def preflight(claude_bin: str, agent_env_: dict[str, str], timeout_s: float = 10.0) -> Preflight:
    return Preflight(ClaudePreflight(claude_bin, agent_env(agent_env_, ()), timeout_s), HAIKU)


async def test_a_verdict_with_its_cost_and_no_tools(
    claude_bin: str, agent_env: dict[str, str], anthropic: AnthropicMock, workdir: Path
) -> None:
    (workdir / "README.md").write_text("the project's secret plan")
    verdict = {
        "verdict": "ask",
        "question": "Which tests?",
        "answers": ["unit", "all"],
        "engine": "claude",
        "preset": "haiku",
        "estimate_usd": 0.2,
    }
    anthropic.script("goal-ask-1", [{"text": json.dumps(verdict)}])
    outcome = await preflight(claude_bin, agent_env).check(
        "fix the tests goal-ask-1", workdir, (SONNET, HAIKU), SONNET, 2.0
    )
    assert outcome.skipped == ""
    assert outcome.verdict is not None and outcome.verdict.decision is PreflightDecision.ASK
    assert outcome.verdict.answers == ("unit", "all") and outcome.verdict.preset == HAIKU
    assert outcome.cost_usd is not None and outcome.cost_usd > 0
    [request] = anthropic.requests_for("goal-ask-1")
    assert request["tools"] == []
    assert "haiku" in str(request["model"])
    assert "README.md" in request["first_user_text"]
    assert "secret plan" not in request["first_user_text"]


async def test_garbage_is_skipped_and_still_costs(
    claude_bin: str, agent_env: dict[str, str], anthropic: AnthropicMock, workdir: Path
) -> None:
    anthropic.script("goal-garbage", [{"text": "Sure! I think it is fine, go ahead."}])
    outcome = await preflight(claude_bin, agent_env).check(
        "goal-garbage", workdir, (HAIKU,), HAIKU, None
    )
    assert outcome.verdict is None and outcome.skipped == "answer is not JSON"
    assert outcome.cost_usd is not None and outcome.cost_usd > 0


async def test_a_hanging_model_is_cut_at_the_timeout(
    claude_bin: str, agent_env: dict[str, str], anthropic: AnthropicMock, workdir: Path
) -> None:
    anthropic.script("goal-hang", [{"stall": 60}])
    started = time.monotonic()
    # long enough for the CLI to start and ask on a loaded machine (it took over 3 s once)
    outcome = await preflight(claude_bin, agent_env, timeout_s=8.0).check(
        "goal-hang", workdir, (HAIKU,), HAIKU, None
    )
    elapsed = time.monotonic() - started
    assert outcome.verdict is None and outcome.skipped == "no answer within 8 s"
    assert 8.0 <= elapsed < 10.0, elapsed
    assert anthropic.requests_for("goal-hang")  # it did reach the model


async def test_an_api_error_is_skipped(
    claude_bin: str, agent_env: dict[str, str], anthropic: AnthropicMock, workdir: Path
) -> None:
    anthropic.script("goal-500", [{"error": {"status": 500}}])
    outcome = await preflight(claude_bin, agent_env).check(
        "goal-500", workdir, (HAIKU,), HAIKU, None
    )
    assert outcome.verdict is None and outcome.skipped.startswith("claude failed")


async def test_a_missing_cli_is_skipped(workdir: Path) -> None:
    outcome = await Preflight(ClaudePreflight("/nonexistent/claude", {}), HAIKU).check(
        "goal", workdir, (HAIKU,), HAIKU, None
    )
    assert outcome.verdict is None and outcome.skipped == "claude CLI not found"
