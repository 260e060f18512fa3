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
    SessionStarted,
    TextEmitted,
    ToolCalled,
    ToolFinished,
    TurnFinished,
    TurnSpec,
    Usage,
)
from executors.process import StderrTail, agent_env, read_lines, spawn, stop_tree

log = logging.getLogger(__name__)

PINNED_VERSION = "2.1.197"
_VERSION_RE = re.compile(r"(\d+\.\d+\.\d+)")


class ClaudeExecutor:
    """Runs ``claude -p --output-format stream-json --verbose``; the prompt goes in on stdin."""

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
        argv = [binary, "-p", "--output-format", "stream-json", "--verbose"]
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

    async def run(self, spec: TurnSpec) -> AsyncIterator[AgentEvent]:
        try:
            proc = await spawn(self.argv(spec), str(spec.cwd), self._env)
        except OSError as exc:
            raise AgentNotInstalled(self.engine, self._binary) from exc
        log.info("task %s turn %s: claude pid %s started", spec.task_id, spec.turn_id, proc.pid)
        stderr = StderrTail()
        drain = asyncio.create_task(stderr.drain(proc.stderr))  # type: ignore[arg-type]
        finished = False
        try:
            assert proc.stdin is not None and proc.stdout is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(spec.prompt.encode())  # an early exit is judged below
                await proc.stdin.drain()
                proc.stdin.close()
            async for line in read_lines(proc.stdout):
                for event in parse_line(line):
                    finished = finished or isinstance(event, TurnFinished)
                    yield event
            await asyncio.wait_for(proc.wait(), self._grace_s * 2)
            await asyncio.wait_for(drain, self._grace_s)
            if not finished:
                raise AgentCrashed("claude ended without a result", proc.returncode,
                                   stderr.text())
        finally:
            with anyio.CancelScope(shield=True):
                await stop_tree(proc, self._grace_s)
                drain.cancel()
            log.info("task %s turn %s: claude pid %s ended rc=%s", spec.task_id, spec.turn_id,
                     proc.pid, proc.returncode)


def parse_line(line: str) -> list[AgentEvent]:
    """One stream-json line -> zero or more events. Unknown lines are ignored, never fatal."""
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return []
    if not isinstance(data, dict):
        return []
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
