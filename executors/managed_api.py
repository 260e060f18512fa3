"""The calls the managed engine makes, through the official ``anthropic`` SDK (imported on
the first turn, never at start-up): the agent and environment (given, else created once per
model and their ids kept in the app's database, ``SessionStore`` under ``managed-setup:``),
sessions, and their events. Every call is bounded by the SDK's timeout; the API's failures
come out as ``AgentCrashed`` / ``SessionNotFound``."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from bot.errors import AgentCrashed, SessionNotFound
from bot.models import Phrase
from bot.ports import SessionStore
from executors.managed_settings import ManagedSettings

if TYPE_CHECKING:
    from anthropic import AsyncAnthropic

ENGINE = "managed"
SETUP_KEY = "managed-setup:"  # + the model: the ids made for it
SYSTEM = (
    "You are a coding agent working for Detach's owner from their phone. Work in the mounted "
    "repository when there is one. End with a short answer saying what you did."
)


def client_for(settings: ManagedSettings) -> AsyncAnthropic:
    from anthropic import AsyncAnthropic

    key = settings.managed_api_key.get_secret_value() if settings.managed_api_key else ""
    return AsyncAnthropic(
        api_key=key,
        base_url=settings.managed_base_url,
        timeout=settings.managed_request_timeout_s,
        max_retries=1,
    )


class ManagedApi:
    """One turn's client and the calls it makes."""

    def __init__(
        self, client: AsyncAnthropic, settings: ManagedSettings, sessions: SessionStore | None
    ) -> None:
        self._client = client
        self._settings = settings
        self._sessions = sessions

    async def setup(self, model: str) -> tuple[str, str]:
        """``(agent_id, environment_id)`` for ``model``: the configured ones, else those made
        for it before, else made now (and kept)."""
        given = self._settings.managed_agent_id, self._settings.managed_environment_id
        if given[0] and given[1]:
            return given[0], given[1]
        kept = await self._sessions.load(SETUP_KEY + model) if self._sessions else None
        ids = dict(kept[0]) if kept else {}
        async with _translated():
            if not (given[0] or ids.get("agent")):
                agent = await self._client.beta.agents.create(
                    name=f"Detach ({model})",
                    model=model,
                    system=SYSTEM,
                    tools=[{"type": "agent_toolset_20260401"}],  # the API's built-in tools
                )
                ids["agent"] = agent.id
            if not (given[1] or ids.get("environment")):
                environment = await self._client.beta.environments.create(
                    name="Detach", config={"type": "cloud", "networking": {"type": "unrestricted"}}
                )
                ids["environment"] = environment.id
        if self._sessions is not None:
            await self._sessions.save(SETUP_KEY + model, ENGINE, [ids])
        return given[0] or ids["agent"], given[1] or ids["environment"]

    async def create_session(
        self, agent_id: str, environment_id: str, title: str, resource: dict[str, Any] | None
    ) -> str:
        async with _translated():
            session = await self._client.beta.sessions.create(
                agent=agent_id,
                environment_id=environment_id,
                title=title,
                resources=[resource] if resource else [],  # type: ignore[list-item]
            )
        return session.id

    async def send(self, session_id: str, event: dict[str, Any]) -> None:
        async with _translated(session_id):
            await self._client.beta.sessions.events.send(session_id, events=[event])  # type: ignore[list-item]

    @contextlib.asynccontextmanager
    async def stream(self, session_id: str) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """The session's live events (opened before the message is sent, so none is missed);
        a silence longer than DETACH_MANAGED_IDLE_TIMEOUT_S fails the turn."""
        async with _translated(session_id):
            opened = await self._client.beta.sessions.events.stream(
                session_id, timeout=self._settings.managed_idle_timeout_s
            )
        async with opened:
            yield _dicts(opened, session_id)

    async def interrupt(self, session_id: str) -> None:
        """The API's stop: the session goes idle and keeps its history (a reply continues)."""
        await self.send(session_id, {"type": "user.interrupt"})


async def _dicts(stream: Any, session_id: str) -> AsyncIterator[dict[str, Any]]:
    async with _translated(session_id):
        async for event in stream:
            yield event.to_dict()


@contextlib.asynccontextmanager
async def _translated(session_id: str | None = None) -> AsyncIterator[None]:
    """The SDK's errors as the bot's: a session the API does not know is ``SessionNotFound``;
    anything else fails the turn with the API's status and message (never the key)."""
    import anthropic

    try:
        yield
    except anthropic.NotFoundError as exc:
        if session_id is None:
            raise _crashed(exc.status_code, _message(exc)) from exc
        raise SessionNotFound(ENGINE, session_id) from exc
    except anthropic.APIStatusError as exc:
        raise _crashed(exc.status_code, _message(exc)) from exc
    except anthropic.APIError as exc:  # unreachable, timed out, a broken stream
        raise _crashed(None, type(exc).__name__ + ": " + str(exc)) from exc


def _message(exc: Any) -> str:
    body: dict[str, Any] = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    said = error.get("message") if isinstance(error, dict) else None
    return str(said or exc.message)[:300]


def _crashed(status: int | None, message: str) -> AgentCrashed:
    where = f"{status}: " if status else ""
    return AgentCrashed(
        f"Managed Agents API: {where}{message}",
        None,
        "",
        Phrase("agent.managed_api", {"error": f"{where}{message}"}),
    )
