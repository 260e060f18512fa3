"""The real pinned claude CLI against the scripted Anthropic server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from pathlib import Path

import pytest

from bot.errors import AgentCrashed, SessionNotFound
from bot.events import (
    ApprovalDecision,
    ApprovalRequest,
    SessionStarted,
    TextEmitted,
    ToolCalled,
    ToolFinished,
    TurnFinished,
)
from bot.models import ApprovalMode, TurnSpec
from bot.telegram.texts import Texts
from executors.claude import ClaudeExecutor
from tests.support.processes import matching


def spec(
    prompt: str,
    cwd: Path,
    resume: str | None = None,
    mode: ApprovalMode = ApprovalMode.ASK,
    allowed: tuple[str, ...] = (),
) -> TurnSpec:
    return TurnSpec(
        task_id=1,
        turn_id=1,
        prompt=prompt,
        cwd=cwd,
        resume_session_id=resume,
        approval_mode=mode,
        allowed_tools=allowed,
    )


class Scripted:
    """An Approver that answers from a list (deny when it runs out) and keeps the requests."""

    def __init__(self, *decisions: ApprovalDecision) -> None:
        self.decisions = list(decisions)
        self.requests: list[ApprovalRequest] = []

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision:
        self.requests.append(request)
        return self.decisions.pop(0) if self.decisions else ApprovalDecision(False, "no")


async def collect(
    executor: ClaudeExecutor, turn: TurnSpec, approver: Scripted | None = None
) -> list:
    return [event async for event in executor.run(turn, approver or Scripted())]


async def test_version_is_the_pinned_one(claude_bin, agent_env):
    assert await ClaudeExecutor(claude_bin, agent_env).version() == "2.1.197"


async def test_text_turn(claude_bin, agent_env, anthropic, workdir):
    anthropic.script("MARK-TEXT", [{"text": "Hello from the mock."}])
    events = await collect(ClaudeExecutor(claude_bin, agent_env), spec("MARK-TEXT hi", workdir))
    started = [e for e in events if isinstance(e, SessionStarted)]
    assert len(started) == 1 and uuid.UUID(started[0].session_id)
    assert TextEmitted("Hello from the mock.") in events
    final = events[-1]
    assert isinstance(final, TurnFinished) and not final.is_error
    assert final.result_text == "Hello from the mock."
    assert final.session_id == started[0].session_id
    assert final.cost_usd is not None and final.cost_usd > 0
    assert final.usage.input_tokens > 0


async def test_prompt_that_looks_like_a_flag_is_a_prompt(claude_bin, agent_env, anthropic, workdir):
    anthropic.script("--MARK-FLAG", [{"text": "fine"}])
    executor = ClaudeExecutor(claude_bin, agent_env)
    events = await collect(executor, spec("--MARK-FLAG --help", workdir))
    assert isinstance(events[-1], TurnFinished) and events[-1].result_text == "fine"


async def test_tool_call_turn(claude_bin, agent_env, anthropic, workdir):
    anthropic.script(
        "MARK-TOOL",
        [
            {
                "text": "Let me look.",
                "tool_use": {
                    "name": "Bash",
                    "input": {"command": "echo tool-output-42", "description": "print"},
                },
            },
            {"text": "The command printed tool-output-42."},
        ],
    )
    events = await collect(ClaudeExecutor(claude_bin, agent_env), spec("MARK-TOOL go", workdir))
    calls = [e for e in events if isinstance(e, ToolCalled)]
    results = [e for e in events if isinstance(e, ToolFinished)]
    assert [c.name for c in calls] == ["Bash"] and calls[0].summary == "echo tool-output-42"
    assert not calls[0].reads_only  # a command may change any file
    assert calls[0].detail == "command: echo tool-output-42\ndescription: print"  # all of it
    assert results and not results[0].is_error and "tool-output-42" in results[0].output
    assert events[-1].result_text == "The command printed tool-output-42."
    assert events[-1].num_turns == 2


async def test_a_turn_that_only_reads_says_so(claude_bin, agent_env, anthropic, workdir):
    """Read (and the CLI's other reading tools) change no file: its card needs no git."""
    (workdir / "notes.txt").write_text("read-me-42\n")
    anthropic.script(
        "MARK-READ",
        [
            {"tool_use": {"name": "Read", "input": {"file_path": str(workdir / "notes.txt")}}},
            {"text": "It says read-me-42."},
        ],
    )
    turn = spec("MARK-READ go", workdir, mode=ApprovalMode.AUTO, allowed=("Read",))
    events = await collect(ClaudeExecutor(claude_bin, agent_env), turn)
    calls = [e for e in events if isinstance(e, ToolCalled)]
    assert [(c.name, c.reads_only) for c in calls] == [("Read", True)]
    results = [e for e in events if isinstance(e, ToolFinished)]
    assert results and "read-me-42" in results[0].output
    assert events[-1].result_text == "It says read-me-42."


async def test_resumed_turn_sends_prior_conversation(claude_bin, agent_env, anthropic, workdir):
    anthropic.script("MARK-RESUME", [{"text": "first answer"}, {"echo": True}])
    executor = ClaudeExecutor(claude_bin, agent_env)
    first = await collect(executor, spec("MARK-RESUME one", workdir))
    session_id = first[-1].session_id
    second = await collect(executor, spec("and the second question", workdir, resume=session_id))
    assert second[-1].session_id == session_id
    last_request = anthropic.requests_for("MARK-RESUME")[-1]
    texts = [str(m.get("content")) for m in last_request["messages"]]
    assert "assistant" in last_request["roles"]
    assert any("first answer" in t for t in texts) and "second question" in texts[-1]
    assert "ECHO" in second[-1].result_text


async def test_a_session_this_machine_does_not_have_is_session_not_found(
    claude_bin, agent_env, workdir
):
    """What a scale-out worker meets resuming a task another machine ran (measured: 2.1.197
    says "No conversation found with session ID" and runs nothing)."""
    executor = ClaudeExecutor(claude_bin, agent_env)
    gone = str(uuid.uuid4())
    with pytest.raises(SessionNotFound) as caught:
        await collect(executor, spec("hello again", workdir, resume=gone))
    assert caught.value.session_id == gone


async def test_api_error_is_reported_by_is_error(claude_bin, agent_env, anthropic, workdir):
    anthropic.script(
        "MARK-ERR",
        [
            {
                "error": {
                    "status": 400,
                    "type": "invalid_request_error",
                    "message": "scripted failure",
                }
            }
        ],
    )
    events = await collect(ClaudeExecutor(claude_bin, agent_env), spec("MARK-ERR x", workdir))
    final = events[-1]
    assert isinstance(final, TurnFinished) and final.is_error
    assert "scripted failure" in final.result_text


async def test_missing_binary_is_not_installed(agent_env, workdir):
    from bot.errors import AgentNotInstalled

    with pytest.raises(AgentNotInstalled):
        await collect(ClaudeExecutor("/nonexistent/claude", agent_env), spec("x", workdir))


_sleepers = matching


async def test_cancel_leaves_no_process_behind(claude_bin, agent_env, anthropic, workdir):
    marker = "sleep 37.25"
    anthropic.script(
        "MARK-CANCEL",
        [
            {"tool_use": {"name": "Bash", "input": {"command": marker, "description": "wait"}}},
            {"text": "done"},
        ],
    )
    executor = ClaudeExecutor(claude_bin, agent_env, cancel_grace_s=3)
    seen: list = []

    async def consume() -> None:
        async for event in executor.run(spec("MARK-CANCEL go", workdir), Scripted()):
            seen.append(event)

    task = asyncio.create_task(consume())
    async with asyncio.timeout(30):
        while not _sleepers(marker):
            await asyncio.sleep(0.1)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, AgentCrashed):
        await asyncio.wait_for(task, 15)
    assert any(isinstance(e, ToolCalled) for e in seen)
    assert _sleepers(marker) == []


async def test_denied_tool_calls_are_reported_in_the_result(
    claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-DENY",
        [
            {
                "tool_use": {
                    "name": "Bash",
                    "input": {"command": "touch denied.txt", "description": "create"},
                }
            },
            {"text": "I could not create the file."},
        ],
    )
    events = await collect(
        ClaudeExecutor(claude_bin, agent_env),
        spec("MARK-DENY go", workdir, mode=ApprovalMode.READONLY),
    )
    final = events[-1]
    assert not final.is_error and final.denials == ("Bash: touch denied.txt",)
    assert not (workdir / "denied.txt").exists()


def test_agents_never_see_the_bot_token_and_run_quiet():
    from executors.process import agent_env

    token = "123456:SECRET-TOKEN"
    env = agent_env(
        {
            "DETACH_BOT_TOKEN": token,
            "DETACH_DATA_DIR": "/x",
            "TG": f"x{token}",
            "ANTHROPIC_API_KEY": "sk-ant",
            "PATH": "/usr/bin",
        },
        [token],
    )
    assert token not in "".join(env.values()) and "DETACH_DATA_DIR" not in env
    assert env["ANTHROPIC_API_KEY"] == "sk-ant" and env["PATH"] == "/usr/bin"
    assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert env["DISABLE_TELEMETRY"] == "1"


async def test_approval_allowed_runs_the_tool(claude_bin, agent_env, anthropic, workdir):
    anthropic.script(
        "MARK-ALLOW",
        [
            {
                "tool_use": {
                    "name": "Bash",
                    "input": {"command": "touch allowed.txt", "description": "create"},
                }
            },
            {"text": "created"},
        ],
    )
    approver = Scripted(ApprovalDecision(allow=True))
    events = await collect(
        ClaudeExecutor(claude_bin, agent_env), spec("MARK-ALLOW go", workdir), approver
    )
    (request,) = approver.requests
    assert request.tool_name == "Bash" and request.tool_input["command"] == "touch allowed.txt"
    assert request.rule == "Bash(touch allowed.txt)"
    assert (workdir / "allowed.txt").exists() and events[-1].denials == ()


async def test_approval_denied_carries_the_message(claude_bin, agent_env, anthropic, workdir):
    anthropic.script(
        "MARK-NO",
        [
            {
                "tool_use": {
                    "name": "Write",
                    "input": {"file_path": str(workdir / "w.txt"), "content": "x"},
                }
            },
            {"text": "skipped"},
        ],
    )
    approver = Scripted(ApprovalDecision(allow=False, message="Denied from Telegram: MSG-42"))
    events = await collect(
        ClaudeExecutor(claude_bin, agent_env), spec("MARK-NO go", workdir), approver
    )
    assert approver.requests[0].rule == "Write"  # no rule suggested: the whole tool
    results = [e for e in events if isinstance(e, ToolFinished)]
    assert results[0].is_error and "MSG-42" in results[0].output
    assert events[-1].denials and not (workdir / "w.txt").exists()
    assert "MSG-42" in str(anthropic.requests_for("MARK-NO")[-1]["messages"])


async def test_agent_question_answers_reach_the_model(claude_bin, agent_env, anthropic, workdir):
    anthropic.script(
        "MARK-ASK",
        [
            {
                "tool_use": {
                    "name": "AskUserQuestion",
                    "input": {
                        "questions": [
                            {
                                "question": "Which color?",
                                "header": "Color",
                                "multiSelect": False,
                                "options": [
                                    {"label": "Red", "description": "r"},
                                    {"label": "Blue", "description": "b"},
                                ],
                            }
                        ]
                    },
                }
            },
            {"echo": True},
        ],
    )
    approver = Scripted(ApprovalDecision(allow=True, answers={"Which color?": "Blue"}))
    events = await collect(
        ClaudeExecutor(claude_bin, agent_env), spec("MARK-ASK go", workdir), approver
    )
    (request,) = approver.requests
    assert request.questions[0].options == ("Red", "Blue")
    assert '"Which color?"="Blue"' in events[-1].result_text


async def test_auto_mode_uses_allowed_tools_and_never_asks(
    claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-AUTO",
        [
            {
                "tool_use": {
                    "name": "Bash",
                    "input": {"command": "touch auto.txt", "description": "create"},
                }
            },
            {"text": "done"},
        ],
    )
    approver = Scripted()
    await collect(
        ClaudeExecutor(claude_bin, agent_env),
        spec("MARK-AUTO go", workdir, mode=ApprovalMode.AUTO, allowed=("Bash",)),
        approver,
    )
    assert approver.requests == [] and (workdir / "auto.txt").exists()


async def test_a_cli_that_is_not_logged_in_says_what_to_do_here(claude_bin, agent_env, workdir):
    """2.1.197 without any key answers "Not logged in · Please run /login", which means nothing
    to a person on a phone: the turn fails saying what to do on the bot's machine."""
    env = {k: v for k, v in agent_env.items() if k != "ANTHROPIC_API_KEY"}
    with pytest.raises(AgentCrashed) as failed:
        await collect(ClaudeExecutor(claude_bin, env), spec("hello", workdir))
    assert "run `claude` once in a terminal" in failed.value.reason
    assert "ANTHROPIC_API_KEY" in failed.value.reason and "/login" not in failed.value.reason


async def test_status_says_when_no_login_is_found(claude_bin, agent_env, tmp_path):
    texts = Texts()

    async def status(env: dict[str, str]) -> str:
        return texts.say("en", await ClaudeExecutor(claude_bin, env).probe())

    assert "NO LOGIN" not in await status(agent_env)
    bare = {k: v for k, v in agent_env.items() if k != "ANTHROPIC_API_KEY"}
    line = await status(bare)
    assert "NO LOGIN FOUND" in line and "run `claude` once" in line
    assert "ВХОД НЕ НАЙДЕН" in texts.say("ru", await ClaudeExecutor(claude_bin, bare).probe())
    (Path(bare["HOME"]) / ".claude").mkdir(exist_ok=True)
    (Path(bare["HOME"]) / ".claude" / ".credentials.json").write_text("{}")
    assert "NO LOGIN" not in await status(bare)
