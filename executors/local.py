"""The local engine: any OpenAI-compatible Chat Completions endpoint (llama.cpp's llama-server,
Ollama, vLLM, LM Studio, or a hosted provider such as OpenRouter or Fireworks) driven through the
official ``openai`` SDK, streaming, with Detach's own tool loop (executors/local_tools.py).

Where the endpoint is: the task's preset (``base_url``, ``model``, ``api_key_env``,
``context_window`` in DETACH_CONFIG), else ``DETACH_LOCAL_BASE_URL`` / ``_MODEL`` /
``_API_KEY_ENV`` / ``_CONTEXT_WINDOW``, else the first local preset that names a ``base_url``
(the default of a machine configured by its presets alone). The engine is on when either
``DETACH_LOCAL_BASE_URL`` is set or a local preset names a ``base_url``.

A turn: the stored conversation (the app's database, so a reply resumes it after any restart),
the new prompt, then model calls until the model answers without calling a tool, at most
``DETACH_LOCAL_MAX_STEPS``. Writes and commands go through the same approval desk as the CLIs
(modes and grants included); a sandboxed task writes only inside its directory and runs its
commands in bubblewrap without asking. The conversation is saved after every completed step, so
a stored conversation always ends in a state the endpoint accepts. When it nears the context
window, the oldest tool results are shortened (and say so). Errors are task failures with the
reason: unreachable endpoint, a refused key, rate limits (retried with backoff, then failed),
malformed tool arguments twice, a model that never stops calling tools.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.errors import AgentCrashed
from bot.events import (
    AgentEvent,
    SessionStarted,
    SteerDeferred,
    SteerTaken,
    TextEmitted,
    TurnFinished,
    Usage,
    UsageUpdated,
)
from bot.models import ApprovalMode, Phrase, Preset, TurnSpec
from bot.ports import (
    NO_STEERING,
    NOW,
    Approver,
    EngineConfig,
    EngineSpec,
    Isolation,
    Ready,
    SessionStore,
    SteerInbox,
)
from executors import sandbox
from executors.local_calls import CallContext, TurnState, run_calls
from executors.local_chat import Answer, Endpoint, complete
from executors.local_client import openai_client
from executors.local_commands import command_runner
from executors.local_endpoints import Endpoints
from executors.local_history import assistant, fit, system_prompt
from executors.local_mcp import mcp_tools
from executors.local_pieces import Bounds
from executors.local_settings import LocalSettings
from executors.local_tools import ToolBox
from executors.shield import shielded

if TYPE_CHECKING:
    from openai import AsyncOpenAI

log = logging.getLogger(__name__)

EMPTY_ANSWER = "the model answered nothing; reply to ask it again"


class LocalExecutor:
    engine = "local"

    def __init__(
        self,
        settings: LocalSettings,
        environ: Mapping[str, str],
        secrets: Sequence[str],
        sessions: SessionStore | None,
        presets: Sequence[Preset] = (),
    ) -> None:
        """``presets``: the local presets; those that name a ``base_url`` are endpoints too."""
        self._where = Endpoints(settings, environ, presets)
        self._environ = environ
        self._secrets = tuple(secrets)
        self._sessions = sessions
        self._max_steps = settings.local_max_steps
        self._max_tokens = settings.local_max_tokens
        self._bounds = Bounds.of(settings.local_max_tokens, settings.local_answer_timeout_s)
        self._command_timeout_s = settings.local_command_timeout_s
        self._retry_budget_s = settings.local_retry_s

    # -- the engine's declaration ------------------------------------------------------------
    async def probe(self) -> Phrase:
        endpoints = await self._where.probe()
        sandboxed = sandbox.status(self.sandbox_problem())
        return Phrase("probe.local", {"endpoints": endpoints, "sandbox": sandboxed})

    def sandbox_problem(self) -> Phrase | None:
        return sandbox.problem(self._environ)

    def _key(self, env_name: object) -> str | None:
        return self._where.key(env_name)

    def endpoint(self, spec: TurnSpec) -> Endpoint:
        return self._where.for_turn(spec)

    # -- a turn ------------------------------------------------------------------------------
    async def run(
        self,
        spec: TurnSpec,
        approver: Approver,
        steering: SteerInbox = NO_STEERING,
        ready: Ready = NOW,
    ) -> AsyncGenerator[AgentEvent, None]:
        """A steer goes in before the next model call, as the owner's message after the tool
        results; one still waiting when the model answered without a tool is deferred."""
        await ready()  # no process starts here: nothing to overlap with
        endpoint = self.endpoint(spec)
        client = await openai_client(endpoint.base_url, self._key(endpoint.api_key_env) or "none")
        try:
            async for event in self._turn(spec, approver, endpoint, client, steering):
                yield event
        finally:
            await shielded(client.close())

    async def _turn(
        self,
        spec: TurnSpec,
        approver: Approver,
        endpoint: Endpoint,
        client: AsyncOpenAI,
        steering: SteerInbox,
    ) -> AsyncGenerator[AgentEvent, None]:
        """The stored conversation and the prompt, then model calls and their tools until the
        model answers without one (at most DETACH_LOCAL_MAX_STEPS), saved after every step."""
        session_id = spec.resume_session_id or uuid.uuid4().hex
        messages = _opening(await self._history(spec.resume_session_id), spec)
        await self._save(session_id, messages)
        yield SessionStarted(session_id, endpoint.model)
        runner = command_runner(
            spec, endpoint, self._environ, self._secrets, self._command_timeout_s
        )
        async with mcp_tools(spec.mcp_servers) as mcp:  # `detach mcp`'s tools (local_mcp.py)
            tools = ToolBox(spec.cwd, runner, spec.deny_read)
            ctx = CallContext(spec, approver, tools, mcp)
            model = _Model(client, endpoint, steering, mcp.schemas)
            async for event in self._steps(ctx, model, session_id, messages):
                yield event

    async def _steps(
        self, ctx: CallContext, model: _Model, session_id: str, messages: list[dict[str, Any]]
    ) -> AsyncGenerator[AgentEvent, None]:
        """Model calls and their tools until the model answers without one."""
        steering = model.steering
        turn = TurnState()
        for step in range(1, self._max_steps + 1):
            answer = Answer()
            async for event in self._ask(model, turn, messages, answer):
                yield event
            reply = answer.got()
            if not reply.calls:
                await self._save(session_id, messages)
                for event in _finished(reply.text, session_id, step, turn, steering):
                    yield event
                return
            async for event in run_calls(reply, ctx, turn, messages):
                yield event
            await self._save(session_id, messages)
        raise AgentCrashed(
            f"the model was still calling tools after {self._max_steps} steps "
            "(DETACH_LOCAL_MAX_STEPS); reply to continue from where it stopped",
            None,
            "",
            Phrase("agent.local_max_steps", {"steps": self._max_steps}),
        )

    async def _ask(
        self, model: _Model, turn: TurnState, messages: list[dict[str, Any]], answer: Answer
    ) -> AsyncGenerator[AgentEvent, None]:
        """One model call (``answer`` gets its reply): the owner's steers go in first, the
        conversation is fitted to the context window, retries are told as they happen; the
        reply's usage and text are told and the reply is appended to the conversation."""
        for steer in model.steering.take():  # the owner's words, before the model's next call
            messages.append({"role": "user", "content": steer.text})
            yield SteerTaken(steer.steer_id)
        fit(messages, model.endpoint.context_window)
        call = complete(
            model.client,
            model.endpoint,
            messages,
            self._max_tokens,
            self._retry_budget_s,
            answer,
            self._bounds,
            tools=model.tools,
        )
        async with contextlib.aclosing(call) as retries:
            async for retrying in retries:
                yield retrying  # the progress line says the endpoint is being retried
        reply = answer.got()
        turn.usage = _add(turn.usage, reply.usage)
        yield UsageUpdated(turn.usage)
        if reply.text:
            yield TextEmitted(reply.text)
        messages.append(assistant(reply.text, reply.calls))

    async def _history(self, session_id: str | None) -> list[dict[str, Any]]:
        if session_id is None:
            return []
        if self._sessions is None:
            raise AgentCrashed(
                "this bot keeps no conversations for /local",
                None,
                "",
                Phrase("agent.local_no_sessions"),
            )
        stored = await self._sessions.load(session_id)
        if stored is None:
            raise AgentCrashed(
                "the conversation of this task is no longer stored; start a new task",
                None,
                "",
                Phrase("agent.local_session_gone"),
            )
        return stored

    async def _save(self, session_id: str, messages: list[dict[str, Any]]) -> None:
        if self._sessions is not None:
            # a cancel must not leave half a step stored
            await shielded(self._sessions.save(session_id, self.engine, messages))


@dataclass(frozen=True, slots=True)
class _Model:
    """Where one turn's model calls go, and the owner's steers that precede each."""

    client: AsyncOpenAI
    endpoint: Endpoint
    steering: SteerInbox
    tools: Sequence[dict[str, Any]] = ()  # the MCP servers' functions, beside the engine's own


def _opening(stored: list[dict[str, Any]], spec: TurnSpec) -> list[dict[str, Any]]:
    """The stored conversation under the current system prompt, then the turn's prompt."""
    messages = stored
    system = {"role": "system", "content": system_prompt(spec)}
    if messages and messages[0].get("role") == "system":
        messages[0] = system
    else:
        messages.insert(0, system)
    messages.append({"role": "user", "content": spec.prompt})
    return messages


def _finished(
    text: str, session_id: str, steps: int, turn: TurnState, steering: SteerInbox
) -> Iterator[AgentEvent]:
    """The model answered without a tool: steers still waiting are deferred, the turn ends."""
    for steer in steering.take():  # the turn ended first
        yield SteerDeferred(steer.steer_id)
    yield TurnFinished(
        is_error=not text.strip(),
        result_text=text if text.strip() else EMPTY_ANSWER,
        session_id=session_id,
        cost_usd=None,
        usage=turn.usage,
        num_turns=steps,
        denials=tuple(turn.denials),
    )


def _add(a: Usage, b: Usage) -> Usage:
    return Usage(a.input_tokens + b.input_tokens, a.output_tokens + b.output_tokens)


def _make(config: EngineConfig) -> LocalExecutor:
    return LocalExecutor(
        config.settings_of(LocalSettings),
        config.environ,
        config.secrets,
        config.sessions,
        config.presets,
    )


SPEC = EngineSpec(
    name="local",
    isolation={  # docs/security.md, "Routing"
        ApprovalMode.AUTO: Isolation.OWNER_RIGHTS,
        ApprovalMode.ASK: Isolation.TAPS,
        ApprovalMode.READONLY: Isolation.RULES,
        ApprovalMode.SANDBOX: Isolation.SANDBOX,
    },
    default_binary="",
    pinned_version="",
    make=_make,
    presets=(),
    settings=LocalSettings,
    mcp_client=True,
)


__all__ = ["SPEC", "Endpoint", "LocalExecutor", "LocalSettings"]
