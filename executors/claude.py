"""Claude Code CLI engine: headless ``-p`` turns in stream-json, normalised into AgentEvents."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import shutil
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import anyio

from bot.errors import AgentCrashed, AgentNotInstalled
from bot.models import (
    AgentEvent,
    ApprovalMode,
    ApprovalRequest,
    Question,
    SessionStarted,
    TextEmitted,
    ToolCalled,
    ToolFinished,
    TurnFinished,
    TurnSpec,
    Usage,
)
from bot.ports import Approver
from executors.process import StderrTail, agent_env, read_lines, spawn, stop_tree

log = logging.getLogger(__name__)

PINNED_VERSION = "2.1.197"
_VERSION_RE = re.compile(r"(\d+\.\d+\.\d+)")


class ClaudeExecutor:
    """Runs ``claude -p`` with stream-json in and out. The prompt goes in as a JSON message on
    stdin (it can never be read as a flag); in ``ask`` mode permission requests come back as
    control requests on stdout (``--permission-prompt-tool stdio``) and are answered on stdin."""

    engine = "claude"

    def __init__(self, binary: str | None, env: Mapping[str, str], secrets: Iterable[str] = (),
                 cancel_grace_s: float = 5.0) -> None:
        self._binary = binary
        self._env = agent_env(env, secrets)
        self._grace_s = cancel_grace_s

    def argv(self, spec: TurnSpec) -> list[str]:
        binary = shutil.which(self._binary) if self._binary else None
        if binary is None:
            raise AgentNotInstalled(self.engine, self._binary)
        argv = [binary, "-p", "--input-format", "stream-json", "--output-format", "stream-json",
                "--verbose"]
        if spec.approval_mode is ApprovalMode.ASK:
            argv += ["--permission-prompt-tool", "stdio"]
        if spec.model:
            argv += ["--model", spec.model]
        if spec.resume_session_id:
            argv.append(f"--resume={uuid.UUID(spec.resume_session_id)}")
        if spec.append_system_prompt:
            argv += ["--append-system-prompt", spec.append_system_prompt]
        if spec.allowed_tools:
            argv += ["--allowedTools", ",".join(spec.allowed_tools)]
        return argv

    async def version(self) -> str:
        argv = [self._binary or "claude", "--version"]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
                env=self._env)
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
        except (OSError, TimeoutError) as exc:
            raise AgentNotInstalled(self.engine, self._binary) from exc
        match = _VERSION_RE.search(out.decode(errors="replace"))
        if proc.returncode != 0 or not match:
            raise AgentNotInstalled(self.engine, self._binary)
        return match.group(1)

    async def run(self, spec: TurnSpec, approver: Approver) -> AsyncIterator[AgentEvent]:
        try:
            proc = await spawn(self.argv(spec), str(spec.cwd), self._env)
        except OSError as exc:
            raise AgentNotInstalled(self.engine, self._binary) from exc
        log.info("task %s turn %s: claude pid %s started", spec.task_id, spec.turn_id, proc.pid)
        stderr = StderrTail()
        drain = asyncio.create_task(stderr.drain(proc.stderr))  # type: ignore[arg-type]
        channel = _Channel(proc, approver)
        finished = False
        try:
            assert proc.stdout is not None
            await channel.send({"type": "user", "parent_tool_use_id": None, "session_id": "",
                                "message": {"role": "user", "content": spec.prompt}})
            async for line in read_lines(proc.stdout):
                data = _json(line)
                if data.get("type") == "control_request":
                    channel.answer(data)
                    continue
                for event in parse_event(data):
                    if isinstance(event, TurnFinished):
                        finished = True
                        channel.close()  # the turn is over: the CLI exits on EOF
                    yield event
            await asyncio.wait_for(proc.wait(), self._grace_s * 2)
            await asyncio.wait_for(drain, self._grace_s)
            if not finished:
                raise AgentCrashed("claude ended without a result", proc.returncode,
                                   stderr.text())
        finally:
            with anyio.CancelScope(shield=True):
                await channel.aclose()
                await stop_tree(proc, self._grace_s)
                drain.cancel()
            log.info("task %s turn %s: claude pid %s ended rc=%s", spec.task_id, spec.turn_id,
                     proc.pid, proc.returncode)


class _Channel:
    """The bot's side of the CLI's stdin: the prompt, and answers to control requests."""

    def __init__(self, proc: asyncio.subprocess.Process, approver: Approver) -> None:
        self._proc = proc
        self._approver = approver
        self._lock = asyncio.Lock()
        self._pending: set[asyncio.Task[None]] = set()

    async def send(self, message: dict[str, Any]) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            return
        async with self._lock:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.write((json.dumps(message) + "\n").encode())
                await stdin.drain()

    def answer(self, data: dict[str, Any]) -> None:
        """Answer without blocking the reader: a person may take minutes to decide."""
        task = asyncio.create_task(self._answer(data))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _answer(self, data: dict[str, Any]) -> None:
        request_id = str(data.get("request_id", ""))
        request = data.get("request") or {}
        if request.get("subtype") != "can_use_tool":
            await self.send(_control_error(request_id, f"unsupported: {request.get('subtype')}"))
            return
        decision = await self._approver.decide(approval_request(request))
        tool_input = request.get("input") or {}
        if decision.answers is not None:  # AskUserQuestion: allowed, with the answers added
            tool_input = {**tool_input, "answers": decision.answers}
        body: dict[str, Any] = (  # always echo updatedInput on allow (2.1.197 requires it)
            {"behavior": "allow", "updatedInput": tool_input}
            if decision.allow else {"behavior": "deny", "message": decision.message})
        await self.send({"type": "control_response", "response": {
            "subtype": "success", "request_id": request_id, "response": body}})

    def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()

    async def aclose(self) -> None:
        for task in list(self._pending):
            task.cancel()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)
        self.close()


def _control_error(request_id: str, error: str) -> dict[str, Any]:
    return {"type": "control_response",
            "response": {"subtype": "error", "request_id": request_id, "error": error}}


def approval_request(request: dict[str, Any]) -> ApprovalRequest:
    """A ``can_use_tool`` control request -> an engine-neutral ApprovalRequest."""
    tool = str(request.get("tool_name") or "?")
    tool_input = request.get("input") or {}
    questions = tuple(
        Question(text=str(q.get("question", "")), header=str(q.get("header", "")),
                 options=tuple(str(o.get("label", "")) for o in q.get("options") or []),
                 multi=bool(q.get("multiSelect")))
        for q in tool_input.get("questions") or [] if isinstance(q, dict)
    ) if tool == "AskUserQuestion" else ()
    return ApprovalRequest(tool_name=tool, tool_input=tool_input,
                           tool_use_id=str(request.get("tool_use_id", "")),
                           rule=_suggested_rule(tool, request.get("permission_suggestions")),
                           blocked_path=request.get("blocked_path"), questions=questions)


def _suggested_rule(tool: str, suggestions: Any) -> str:
    """The CLI's own suggested allow rule (e.g. ``Bash(npm test:*)``), else the whole tool."""
    for suggestion in suggestions or []:
        if suggestion.get("type") == "addRules" and suggestion.get("behavior") == "allow":
            for rule in suggestion.get("rules") or []:
                name, content = rule.get("toolName") or tool, rule.get("ruleContent")
                return f"{name}({content})" if content else str(name)
    return tool


def _json(line: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return {}
    return data if isinstance(data, dict) else {}


def parse_event(data: dict[str, Any]) -> list[AgentEvent]:
    """One stream-json object -> zero or more events. Unknown ones are ignored, never fatal."""
    kind = data.get("type")
    if kind == "system" and data.get("subtype") == "init" and data.get("session_id"):
        return [SessionStarted(str(data["session_id"]), data.get("model"))]
    if kind == "assistant":
        return _assistant_events(data.get("message") or {})
    if kind == "user":
        return _tool_results(data.get("message") or {})
    if kind == "result":
        return [_result(data)]
    return []


def _assistant_events(message: dict[str, Any]) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for block in message.get("content") or []:
        if block.get("type") == "text" and block.get("text"):
            events.append(TextEmitted(block["text"]))
        elif block.get("type") == "tool_use":
            events.append(ToolCalled(str(block.get("id", "")), str(block.get("name", "?")),
                                     summarize_input(block.get("input") or {})))
    return events


def _tool_results(message: dict[str, Any]) -> list[AgentEvent]:
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [ToolFinished(str(b.get("tool_use_id", "")), bool(b.get("is_error")),
                         _text_of(b.get("content"))[:4000])
            for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return ""


def summarize_input(tool_input: dict[str, Any]) -> str:
    for key in ("command", "file_path", "path", "pattern", "url", "description"):
        if isinstance(tool_input.get(key), str):
            return tool_input[key][:300]
    return json.dumps(tool_input, ensure_ascii=False)[:300]


def _result(data: dict[str, Any]) -> TurnFinished:
    usage = data.get("usage") or {}
    denials = tuple(f"{d.get('tool_name', '?')}: {summarize_input(d.get('tool_input') or {})}"
                    for d in data.get("permission_denials") or [] if isinstance(d, dict))
    return TurnFinished(
        is_error=bool(data.get("is_error")),
        result_text=str(data.get("result") or ""),
        session_id=data.get("session_id"),
        cost_usd=data.get("total_cost_usd"),
        usage=Usage(
            input_tokens=int(usage.get("input_tokens") or 0),
            output_tokens=int(usage.get("output_tokens") or 0),
            cache_read_tokens=int(usage.get("cache_read_input_tokens") or 0),
            cache_write_tokens=int(usage.get("cache_creation_input_tokens") or 0)),
        num_turns=int(data.get("num_turns") or 0),
        denials=denials,
        errors=tuple(str(e) for e in data.get("errors") or []),
        subtype=str(data.get("subtype") or ""),
        extra={"api_error_status": data.get("api_error_status"),
               "terminal_reason": data.get("terminal_reason")},
    )
