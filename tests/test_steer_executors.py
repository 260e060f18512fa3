"""Steering a running turn, engine by engine: the real pinned claude and codex CLIs against the
scripted model servers, the bot's own inbox (``bot.turns.steering.SteerBox``) as the seam. What
the model's requests carried is read from the scripted servers."""

from __future__ import annotations

import asyncio
import json

from bot.events import (
    ApprovalDecision,
    SessionStarted,
    Steer,
    SteerDeferred,
    SteerTaken,
    ToolCalled,
    ToolFinished,
    TurnFinished,
)
from bot.models import ApprovalMode, TurnSpec
from bot.turns.steering import SteerBox
from executors.claude import ClaudeExecutor
from executors.codex import CodexExecutor
from tests.test_claude_executor import Scripted
from tests.test_claude_executor import spec as claude_spec
from tests.test_codex_executor import spec as codex_spec

STEER = "STEER-TEXT also print banana"


def bash(command: str, text: str = "") -> dict:
    return {"text": text or "working", "tool_use": {"name": "Bash", "input": {"command": command}}}


async def steered(executor, turn: TurnSpec, when, inbox: SteerBox, steer_id: int = 7) -> list:
    """The turn's events; the steer is put into ``inbox`` when ``when(event)`` first holds."""
    events: list = []
    sent = False
    async with asyncio.timeout(90):
        async for event in executor.run(turn, Scripted(), inbox):
            events.append(event)
            if not sent and when(event):
                assert inbox.put(Steer(steer_id, STEER))
                sent = True
    assert sent
    return events


def carried(request: dict) -> bool:
    return STEER in json.dumps(request)


def system_steer(request: dict) -> list[dict]:
    return [m for m in request["messages"] if m["role"] == "system" and STEER in str(m)]


async def test_claude_takes_a_steer_in_at_the_next_tool_boundary(
    claude_bin, agent_env, anthropic, workdir
):
    """Sent while the first of two commands runs: the request after its result carries the steer
    (as the CLI's ``system`` note), the turn goes on to its end, one result."""
    anthropic.script(
        "MARK-STEER-TOOLS",
        [bash("sleep 3; echo one"), bash("echo two"), {"text": "done, and banana"}],
    )
    turn = claude_spec("MARK-STEER-TOOLS go", workdir, allowed=("Bash",))
    inbox = SteerBox(turn.turn_id)
    events = await steered(
        ClaudeExecutor(claude_bin, agent_env), turn, lambda e: isinstance(e, ToolCalled), inbox
    )
    finals = [e for e in events if isinstance(e, TurnFinished)]
    assert len(finals) == 1 and finals[0].result_text == "done, and banana"
    assert SteerTaken(7) in events and SteerDeferred(7) not in events
    taken = events.index(SteerTaken(7))
    first_result = next(i for i, e in enumerate(events) if isinstance(e, ToolFinished))
    assert first_result < taken < events.index(finals[0])  # echoed at the first boundary
    requests = anthropic.requests_for("MARK-STEER-TOOLS")
    assert len(requests) == 3
    assert not carried(requests[0])
    assert len(system_steer(requests[1])) == 1  # the model's very next request
    assert "while you were working" in str(system_steer(requests[1])[0]["content"])


async def test_claude_defers_a_steer_into_a_turn_without_a_tool(
    claude_bin, agent_env, anthropic, workdir
):
    """No tool-call boundary ahead: never written, the turn ends with its own answer and the
    steer is said to run as the next turn; the model never saw it in this turn."""
    anthropic.script("MARK-STEER-TEXT", [{"text": "just text", "delay": 2}])
    turn = claude_spec("MARK-STEER-TEXT hi", workdir)
    inbox = SteerBox(turn.turn_id)
    events = await steered(
        ClaudeExecutor(claude_bin, agent_env), turn, lambda e: isinstance(e, SessionStarted), inbox
    )
    final = events[-1]
    assert isinstance(final, TurnFinished) and final.result_text == "just text"
    assert SteerDeferred(7) in events and SteerTaken(7) not in events
    assert events.index(SteerDeferred(7)) < len(events) - 1  # said before the verdict
    assert [e for e in events if isinstance(e, TurnFinished)] == [final]
    assert not any(carried(r) for r in anthropic.requests_for("MARK-STEER-TEXT"))


async def test_claude_steer_while_an_approval_waits_goes_in_with_the_answer(
    claude_bin, agent_env, anthropic, workdir
):
    """Sent while the owner is asked about a command: written at once, the CLI takes it in at
    the boundary after that command (the answer's), in the same turn."""
    anthropic.script("MARK-STEER-ASK", [bash("touch asked.txt"), {"text": "after the approval"}])
    turn = claude_spec("MARK-STEER-ASK go", workdir, mode=ApprovalMode.ASK)
    inbox = SteerBox(turn.turn_id)

    class SteersThenAllows(Scripted):
        async def decide(self, request):  # type: ignore[no-untyped-def]
            inbox.put(Steer(9, STEER))
            await asyncio.sleep(1.0)  # the owner takes a moment: the steer is written meanwhile
            return await super().decide(request)

    approver = SteersThenAllows(ApprovalDecision(allow=True))
    async with asyncio.timeout(90):
        events = [e async for e in ClaudeExecutor(claude_bin, agent_env).run(turn, approver, inbox)]
    assert len(approver.requests) == 1 and (workdir / "asked.txt").exists()
    assert SteerTaken(9) in events and isinstance(events[-1], TurnFinished)
    requests = anthropic.requests_for("MARK-STEER-ASK")
    assert len(requests) == 2 and len(system_steer(requests[1])) == 1


async def test_codex_takes_a_steer_in_through_turn_steer(codex_bin, codex_env, openai, workdir):
    """``turn/steer`` bound to the running turn: the Responses server's next request of the
    same turn carries the steer as a user message; one ``turn/completed``."""
    openai.script(
        "MARK-CSTEER",
        [{"shell": "sleep 3; echo one"}, {"shell": "echo two"}, {"text": "codex done"}],
    )
    turn = codex_spec("MARK-CSTEER go", workdir, mode=ApprovalMode.AUTO)
    inbox = SteerBox(turn.turn_id)
    events = await steered(
        CodexExecutor(codex_bin, codex_env), turn, lambda e: isinstance(e, ToolCalled), inbox
    )
    finals = [e for e in events if isinstance(e, TurnFinished)]
    assert len(finals) == 1 and finals[0].result_text == "codex done"
    assert SteerTaken(7) in events and events.index(SteerTaken(7)) < events.index(finals[0])
    first_result = next(i for i, e in enumerate(events) if isinstance(e, ToolFinished))
    assert first_result < events.index(SteerTaken(7))  # said when the turn shows it
    requests = openai.requests_for("MARK-CSTEER")
    assert len(requests) == 3 and not carried(requests[0])
    assert carried(requests[1])  # the request after the first command's output
