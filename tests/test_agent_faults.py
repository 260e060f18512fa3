"""Agent faults end cleanly: a misbehaving agent binary (tests/support/fake_claude.py) driven by
the real Claude executor. Garbage is skipped, the answer kept; daemons and pipe holders are
stopped with the turn; an agent that lingers after its result is stopped and its answer kept."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.errors import AgentCrashed
from bot.events import ApprovalDecision, SessionStarted, TurnFinished
from bot.models import TurnSpec
from executors.claude import ClaudeExecutor
from executors.claude_protocol import parse_event
from executors.tree import TAG_ENV, kill_tagged
from tests.support import fake_claude
from tests.support.processes import matching


class Deny:
    async def decide(self, request):  # type: ignore[no-untyped-def]
        return ApprovalDecision(False, "no")


@pytest.fixture
def fake_bin(tmp_path: Path) -> str:
    return fake_claude.script(tmp_path)


def spec(prompt: str, cwd: Path, tag: str, resume: str | None = None) -> TurnSpec:
    return TurnSpec(
        task_id=1, turn_id=1, prompt=prompt, cwd=cwd, process_tag=tag, resume_session_id=resume
    )


async def collect(executor: ClaudeExecutor, turn: TurnSpec, timeout_s: float = 30) -> list:
    async with asyncio.timeout(timeout_s):
        return [event async for event in executor.run(turn, Deny())]


async def _until_gone(marker: str, timeout_s: float = 10) -> None:
    async with asyncio.timeout(timeout_s):
        while matching(marker):
            await asyncio.sleep(0.05)


def _env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


async def test_garbage_lines_are_skipped_and_the_answer_kept(fake_bin, tmp_path):
    events = await collect(
        ClaudeExecutor(fake_bin, _env(), cancel_grace_s=1), spec("GARBAGE", tmp_path, "t-garbage:1")
    )
    final = events[-1]
    assert isinstance(final, TurnFinished) and not final.is_error
    assert final.result_text == "the valid answer after garbage"
    assert final.cost_usd is None and final.usage.input_tokens == 0 and final.errors == ()


@pytest.mark.parametrize(
    "line",
    [
        {"type": "user", "message": "x"},
        {"type": "user", "message": {"content": [1, "a", {"type": "tool_result", "content": 5}]}},
        {"type": "assistant", "message": {"content": "just text"}},
        {"type": "assistant", "message": {"content": [None, {"type": "tool_use", "input": []}]}},
        {"type": "result", "usage": "lots", "num_turns": "many", "total_cost_usd": float("nan")},
        {"type": "result", "usage": {"input_tokens": -5, "output_tokens": 1e400}},
        {"type": "system", "subtype": "init", "session_id": ["no"]},
    ],
)
def test_parse_event_never_raises_on_odd_shapes(line):
    for event in parse_event(line):
        if isinstance(event, TurnFinished):
            assert event.usage.input_tokens >= 0 and event.cost_usd is None


async def test_a_session_id_that_is_not_a_uuid_is_ignored(fake_bin, tmp_path):
    executor = ClaudeExecutor(fake_bin, _env(), cancel_grace_s=1)
    events = await collect(executor, spec("BADSESSION", tmp_path, "t-bad:1"))
    assert not [e for e in events if isinstance(e, SessionStarted)]
    assert isinstance(events[-1], TurnFinished) and events[-1].session_id is None
    assert events[-1].result_text == "answer with a bad session"
    with pytest.raises(AgentCrashed, match="not a UUID"):  # one stored by an older version
        executor.argv(spec("x", tmp_path, "t-bad:2", resume="../../etc/passwd"))


async def test_an_agent_that_lingers_after_its_result_is_stopped_and_answered(fake_bin, tmp_path):
    started = time.monotonic()
    events = await collect(
        ClaudeExecutor(fake_bin, _env(), cancel_grace_s=1),
        spec("NOEXIT please", tmp_path, "t-noexit:1"),
    )
    assert isinstance(events[-1], TurnFinished) and not events[-1].is_error
    assert events[-1].result_text.startswith("fake answer to: NOEXIT")
    assert time.monotonic() - started < 15
    await _until_gone("fake-claude")


@pytest.mark.parametrize("word", ["DAEMON", "HOLDOUT"])
async def test_daemons_and_pipe_holders_end_with_the_turn(fake_bin, tmp_path, word):
    tag = f"t-{word.lower()}-{os.getpid()}:1"
    started = time.monotonic()
    events = await collect(
        ClaudeExecutor(fake_bin, _env(), cancel_grace_s=1), spec(word, tmp_path, tag)
    )
    assert isinstance(events[-1], TurnFinished) and not events[-1].is_error
    assert time.monotonic() - started < 15
    await _until_gone(f"fake-daemon-{tag}")


async def test_a_stubborn_agent_and_its_daemon_stop_on_cancel(fake_bin, tmp_path):
    tag = f"t-stubborn-{os.getpid()}:1"
    executor = ClaudeExecutor(fake_bin, _env(), cancel_grace_s=1)
    run = executor.run(spec("STUBBORN DAEMON", tmp_path, tag), Deny())
    first = await asyncio.wait_for(anext(run), 20)
    assert isinstance(first, SessionStarted)
    async with asyncio.timeout(10):
        while not matching(f"fake-daemon-{tag}"):
            await asyncio.sleep(0.05)
    await asyncio.wait_for(run.aclose(), 15)
    await _until_gone(f"fake-daemon-{tag}")
    await _until_gone(str(tmp_path / "fake-claude"))


async def test_a_line_over_the_limit_is_a_clear_failure(fake_bin, tmp_path):
    with pytest.raises(AgentCrashed, match="longer than 32 MiB"):
        await collect(
            ClaudeExecutor(fake_bin, _env(), cancel_grace_s=1),
            spec("HUGE", tmp_path, "t-huge:1"),
            timeout_s=60,
        )


def test_kill_tagged_stops_what_a_crashed_run_left_and_nothing_else(tmp_path):
    code = fake_claude.DAEMON_CODE
    mine = subprocess.Popen(
        [sys.executable, "-c", code, "left-behind"],
        env={**_env(), TAG_ENV: "owner-a:7"},
        start_new_session=True,
    )
    other = subprocess.Popen(
        [sys.executable, "-c", code, "someone-elses"],
        env={**_env(), TAG_ENV: "owner-b:7"},
        start_new_session=True,
    )
    try:
        assert kill_tagged("owner-a:") == 1
        assert mine.wait(10) != 0
        assert other.poll() is None
    finally:
        for proc in (mine, other):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(10)
