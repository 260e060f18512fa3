"""The real pinned codex binary (app-server) against the scripted Responses API server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from pathlib import Path

import pytest

from bot.errors import AgentCrashed, SessionNotFound
from bot.events import (
    ApprovalDecision,
    SessionStarted,
    TextEmitted,
    ToolCalled,
    ToolFinished,
    TurnFinished,
)
from bot.models import ApprovalMode, Phrase, TurnSpec
from bot.telegram.texts import Texts
from executors.codex import CodexExecutor, CodexSettings
from executors.codex_protocol import TurnState, notification_events
from executors.leftovers import MOUNT_POINTS
from tests.support.processes import matching
from tests.test_claude_executor import Scripted

PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello from codex\n*** End Patch\n"


def spec(
    prompt: str, cwd: Path, resume: str | None = None, mode: ApprovalMode = ApprovalMode.ASK
) -> TurnSpec:
    return TurnSpec(
        task_id=1, turn_id=1, prompt=prompt, cwd=cwd, resume_session_id=resume, approval_mode=mode
    )


async def collect(
    executor: CodexExecutor, turn: TurnSpec, approver: Scripted | None = None
) -> list:
    async with asyncio.timeout(60):
        return [e async for e in executor.run(turn, approver or Scripted())]


async def test_version_and_sandbox_probe(codex_bin, codex_env):
    executor = CodexExecutor(codex_bin, codex_env)
    assert await executor.version() == "0.171.0"
    assert await executor.sandbox_refusal() is None


async def test_a_sandbox_refused_for_its_temporary_directory_says_so(codex_bin, codex_env):
    """Codex refuses to create its helper binaries under a TMPDIR that holds CODEX_HOME, and
    its sandbox then cannot start: /status says that, in the chat's language, not "no user
    namespaces"."""
    executor = CodexExecutor(codex_bin, {**codex_env, "TMPDIR": "/tmp"})
    line = await executor.probe()
    reason = executor.sandbox_problem()
    assert reason is not None and reason.key == "probe.codex_tmp_helpers"
    english, russian = Texts().say("en", line), Texts().say("ru", line)
    assert "sandbox UNAVAILABLE" in english and "TMPDIR" in english
    assert "temporary directory /tmp" in english and "user namespaces" not in english
    assert "временном каталоге /tmp" in russian and "UNAVAILABLE" not in russian


async def test_text_turn(codex_bin, codex_env, openai, workdir):
    openai.script("MARK-CTEXT", [{"text": "Hello from the Codex mock."}])
    events = await collect(CodexExecutor(codex_bin, codex_env), spec("MARK-CTEXT hi", workdir))
    (started,) = [e for e in events if isinstance(e, SessionStarted)]
    assert TextEmitted("Hello from the Codex mock.") in events
    final = events[-1]
    assert isinstance(final, TurnFinished) and not final.is_error
    assert final.result_text == "Hello from the Codex mock."
    assert final.session_id == started.session_id and final.usage.input_tokens == 100
    assert started.model == "gpt-5.5"  # the model of the user's Codex config: what is priced


async def test_cached_input_tokens_are_counted_apart(codex_bin, codex_env, openai, workdir):
    """Codex's input tokens include the cached ones, which have their own price."""
    usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 60}}
    openai.script("MARK-CCACHE", [{"text": "cached", "usage": usage}])
    events = await collect(CodexExecutor(codex_bin, codex_env), spec("MARK-CCACHE hi", workdir))
    final = events[-1]
    assert isinstance(final, TurnFinished)
    assert (final.usage.input_tokens, final.usage.cache_read_tokens) == (40, 60)


async def test_command_approval_allowed_and_denied(codex_bin, codex_env, openai, workdir):
    openai.script(
        "MARK-CCMD", [{"shell": "touch yes.txt"}, {"shell": "touch no.txt"}, {"text": "done"}]
    )
    approver = Scripted(ApprovalDecision(allow=True), ApprovalDecision(allow=False))
    events = await collect(
        CodexExecutor(codex_bin, codex_env), spec("MARK-CCMD go", workdir), approver
    )
    assert [r.tool_input["command"] for r in approver.requests] == ["touch yes.txt", "touch no.txt"]
    assert approver.requests[0].rule == "Bash(touch yes.txt)"
    assert (workdir / "yes.txt").exists() and not (workdir / "no.txt").exists()
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert [f.is_error for f in finished] == [False, True]
    assert not events[-1].is_error and "rejected" in str(openai.requests_for("MARK-CCMD")[-1])


async def test_file_change_approval_shows_the_diff(codex_bin, codex_env, openai, workdir):
    openai.script("MARK-CPATCH", [{"patch": PATCH}, {"text": "patched"}])
    approver = Scripted(ApprovalDecision(allow=True))
    events = await collect(
        CodexExecutor(codex_bin, codex_env), spec("MARK-CPATCH go", workdir), approver
    )
    (request,) = approver.requests
    assert request.tool_name == "Edit" and "hello.txt" in request.tool_input["file_path"]
    assert "hello from codex" in request.tool_input["content"]
    assert (workdir / "hello.txt").read_text() == "hello from codex\n"
    (edit,) = [e for e in events if isinstance(e, ToolCalled) and e.name == "Edit"]
    assert "hello.txt" in edit.detail and "hello from codex" in edit.detail  # the whole change


async def test_resumed_turn_carries_the_history(codex_bin, codex_env, openai, workdir):
    openai.script("MARK-CRES", [{"text": "first codex answer"}, {"echo": True}])
    executor = CodexExecutor(codex_bin, codex_env)
    first = await collect(executor, spec("MARK-CRES one", workdir))
    second = await collect(executor, spec("the follow-up", workdir, resume=first[-1].session_id))
    assert second[-1].session_id == first[-1].session_id
    assert "first codex answer" in str(openai.requests_for("MARK-CRES")[-1]["input"])
    assert "the follow-up" in second[-1].result_text


async def test_a_thread_this_machine_does_not_have_is_session_not_found(
    codex_bin, codex_env, workdir
):
    executor = CodexExecutor(codex_bin, codex_env)
    gone = str(uuid.uuid4())
    with pytest.raises(SessionNotFound):
        await collect(executor, spec("hello again", workdir, resume=gone))


async def test_model_server_error_is_a_clear_failure(codex_bin, codex_env, openai, workdir):
    openai.script("MARK-C500", [{"http_error": 500}])
    events = await collect(CodexExecutor(codex_bin, codex_env), spec("MARK-C500 go", workdir))
    final = events[-1]
    assert isinstance(final, TurnFinished) and final.is_error and final.result_text


_procs = matching


async def test_cancel_leaves_no_process_behind(codex_bin, codex_env, openai, workdir):
    """... and none of the empty mount points its sandbox makes for the running command in the
    task's directory, /tmp and $TMPDIR (a stopped command used to leave /tmp/.git behind).
    The turn carries a process tag, as every turn of the bot does: Codex starts a command's
    sandbox in a session of its own, and one started just as the app-server dies is orphaned
    outside the tree (seen about once in ten runs); the tag sweep stops it."""
    openai.script("MARK-CCANCEL", [{"shell": "sleep 41.75"}, {"text": "never"}])
    roots = [workdir, Path(codex_env["TMPDIR"]), Path("/tmp")]
    before = {root / name for root in roots for name in MOUNT_POINTS if (root / name).exists()}
    executor = CodexExecutor(codex_bin, codex_env, cancel_grace_s=3)
    turn = dataclasses.replace(
        spec("MARK-CCANCEL go", workdir, mode=ApprovalMode.AUTO),
        process_tag=f"detach-test-{uuid.uuid4().hex[:8]}:1",
    )

    async def consume() -> None:
        async for _ in executor.run(turn, Scripted()):
            pass

    task = asyncio.create_task(consume())
    async with asyncio.timeout(30):
        while not _procs("sleep 41.75"):
            await asyncio.sleep(0.1)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, AgentCrashed):
        await asyncio.wait_for(task, 15)
    async with asyncio.timeout(5):  # the tag sweep runs in the background, bounded
        while _procs("sleep 41.75") or _procs(str(workdir)):
            await asyncio.sleep(0.1)
    assert not [p for p in _procs("app-server") if p.cwd() == str(workdir)]
    after = {root / name for root in roots for name in MOUNT_POINTS if (root / name).exists()}
    assert after <= before, f"left behind: {sorted(map(str, after - before))}"


async def test_a_sandbox_that_cannot_work_is_refused_clearly(codex_bin, codex_env, workdir):
    executor = CodexExecutor(codex_bin, codex_env)
    # what the start-up probe does where user namespaces are blocked
    executor.refuse_sandbox(Phrase("probe.codex_no_userns"))
    try:
        await collect(executor, spec("x", workdir))
    except AgentCrashed as exc:
        assert "DETACH_CODEX_SANDBOX=danger-full-access" in exc.reason
    else:
        raise AssertionError("a sandboxed turn ran although the sandbox cannot work")
    unsandboxed = CodexExecutor(
        codex_bin, codex_env, settings=CodexSettings(codex_sandbox="danger-full-access")
    )
    unsandboxed.refuse_sandbox(Phrase("probe.codex_no_userns"))
    assert unsandboxed.argv(spec("x", workdir))[1] == "app-server"  # not refused


def test_tools_besides_commands_and_edits_are_tool_calls():
    """An MCP tool, a sub-agent, a saved image: each may change files, so each is a tool call
    (the progress shows it; a turn with none lists no changes on its card)."""
    state = TurnState()
    mcp = {"type": "mcpToolCall", "id": "m1", "server": "fs", "tool": "write", "arguments": {}}
    started = notification_events("item/started", {"item": mcp}, state)
    assert started == [ToolCalled("m1", "mcp__fs__write", "")]
    done = notification_events("item/completed", {"item": {**mcp, "status": "failed"}}, state)
    assert [(e.tool_use_id, e.is_error) for e in done] == [("m1", True)]
    for kind in ("collabAgentToolCall", "imageGeneration", "dynamicToolCall"):
        item = {"type": kind, "id": "x", "prompt": "p"}
        assert [type(e) for e in notification_events("item/started", {"item": item}, state)] == [
            ToolCalled
        ]
    for kind in ("reasoning", "webSearch", "plan"):
        assert notification_events("item/started", {"item": {"type": kind}}, state) == []
