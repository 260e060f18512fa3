"""The managed engine: a task run remotely on Anthropic's Managed Agents (beta
``managed-agents-2026-04-01``) through the official ``anthropic`` SDK, for work that should
not run on this machine. Chosen only explicitly (``/managed``, ``engine=managed``, a managed
preset): it declares no isolation, so no router ever moves a task to it.

A turn: the agent and environment (``executors.managed_api``), a new session with the task's
GitHub repository attached (``executors.managed_repo``) or the stored session of a reply, its
event stream opened, then the prompt sent as a ``user.message``; the stream's events become the
bot's until the session is idle again. Closing the turn early (cancel, timeout, budget) sends
``user.interrupt``, bounded: the session stays, idle, so a reply continues it. The remote agent
acts in its own container with the API's default permissions: nothing of it runs here."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from bot.errors import AgentError, AgentNotInstalled
from bot.events import AgentEvent, SessionStarted, TurnFinished
from bot.models import Phrase, Preset, TurnSpec
from bot.ports import (
    NO_STEERING,
    NOW,
    Approver,
    EngineConfig,
    EngineSpec,
    Ready,
    SessionStore,
    SteerInbox,
)
from executors.managed_api import ManagedApi, client_for
from executors.managed_events import TurnReading, ended, events_of
from executors.managed_repo import repository
from executors.managed_settings import ManagedSettings
from executors.shield import shielded

log = logging.getLogger(__name__)

INTERRUPT_S = 10.0  # the stop's own call, at most
TITLE_CHARS = 80


class ManagedExecutor:
    engine = "managed"

    def __init__(self, settings: ManagedSettings, sessions: SessionStore | None) -> None:
        self._settings = settings
        self._sessions = sessions

    async def probe(self) -> Phrase:
        """On with DETACH_MANAGED_API_KEY (nothing is asked of the API at start-up)."""
        if self._settings.managed_api_key is None:
            raise AgentNotInstalled(self.engine, None, Phrase("probe.managed_off"))
        where = self._settings.managed_base_url or "api.anthropic.com"
        return Phrase("probe.managed", {"where": where, "model": self._settings.managed_model})

    def sandbox_problem(self) -> Phrase | None:
        return None  # its commands run in the remote container, never here

    def model(self, spec: TurnSpec) -> str:
        return spec.model or self._settings.managed_model

    async def run(
        self,
        spec: TurnSpec,
        approver: Approver,
        steering: SteerInbox = NO_STEERING,
        ready: Ready = NOW,
    ) -> AsyncGenerator[AgentEvent, None]:
        """One turn; steers stay in ``steering`` (each runs as the next turn)."""
        await ready()
        # the SDK's first import takes seconds of CPU: off the loop, which keeps serving chats
        await asyncio.to_thread(importlib.import_module, "anthropic")
        client = client_for(self._settings)
        try:
            api = ManagedApi(client, self._settings, self._sessions)
            async with contextlib.aclosing(self._turn(spec, api)) as events:
                async for event in events:
                    yield event
        finally:
            await shielded(client.close())

    async def _turn(self, spec: TurnSpec, api: ManagedApi) -> AsyncGenerator[AgentEvent, None]:
        model = self.model(spec)
        session_id = spec.resume_session_id or await self._session(spec, api, model)
        yield SessionStarted(session_id, model)
        turn = TurnReading(session_id)
        sent = False
        try:
            async with api.stream(session_id) as stream:
                sent = True  # from here the remote turn may run (a cancel mid-send too)
                await api.send(session_id, _message(spec))
                log.info("task %s: managed session %s runs", spec.task_id, session_id)
                async for event in _read(stream, turn):
                    yield event
                    if isinstance(event, TurnFinished):
                        return
            raise ended("the event stream closed before the session was idle")
        finally:
            if sent and not turn.over:  # closed early (cancel, timeout, budget) or failed
                await shielded(_interrupt(api, session_id, spec.task_id))

    async def _session(self, spec: TurnSpec, api: ManagedApi, model: str) -> str:
        agent_id, environment_id = await api.setup(model)
        resource = await repository(spec.cwd, spec.deny_read)
        title = f"Detach #{spec.task_id}: {spec.prompt.splitlines()[0] if spec.prompt else ''}"
        return await api.create_session(agent_id, environment_id, title[:TITLE_CHARS], resource)


async def _read(
    stream: AsyncIterator[dict[str, Any]], turn: TurnReading
) -> AsyncGenerator[AgentEvent, None]:
    async for raw in stream:
        for event in events_of(raw, turn):
            yield event


async def _interrupt(api: ManagedApi, session_id: str, task_id: int) -> None:
    """Stop the remote turn (best effort, bounded): the session idles, kept for a reply."""
    try:
        async with asyncio.timeout(INTERRUPT_S):
            await api.interrupt(session_id)
        log.info("task %s: managed session %s interrupted", task_id, session_id)
    except (AgentError, TimeoutError) as exc:
        log.warning("task %s: managed session %s not interrupted: %s", task_id, session_id, exc)


def _message(spec: TurnSpec) -> dict[str, object]:
    text = spec.prompt
    if spec.append_system_prompt:
        text = f"{spec.append_system_prompt}\n\n{text}"
    return {"type": "user.message", "content": [{"type": "text", "text": text}]}


def _make(config: EngineConfig) -> ManagedExecutor:
    return ManagedExecutor(config.settings_of(ManagedSettings), config.sessions)


SPEC = EngineSpec(
    name="managed",
    isolation={},  # never routed to: only the owner's explicit choice sends work off-machine
    default_binary="",
    pinned_version="",
    make=_make,
    settings=ManagedSettings,
    ack_note="task.ack_managed",
    presets=(
        Preset("cloud", "managed", "claude-sonnet-4-6", (), 3.0, 15.0, 0.3, 3.75),
        Preset("cloud-max", "managed", "claude-opus-4-7", (), 5.0, 25.0, 0.5, 6.25),
        Preset("cloud-lite", "managed", "claude-haiku-4-5-20251001", (), 1.0, 5.0, 0.1, 1.25),
    ),
)

__all__ = ["SPEC", "ManagedExecutor", "ManagedSettings"]
