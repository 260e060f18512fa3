"""A scripted Managed Agents API on 127.0.0.1 (aiohttp), as the published beta describes it:
``/v1/agents``, ``/v1/environments``, ``/v1/sessions`` (create, get, archive), a session's
``/events`` (``user.message``, ``user.interrupt``) and ``/events/stream`` (SSE). Every request
needs the key, as ``x-api-key`` or (what the SDK 2.17 sends) ``Authorization: Bearer``, 401
without the right one, and ``anthropic-beta: managed-agents-2026-04-01`` (400 without it).

Scripts are chosen by a substring of a session's first message; turn n of a session (its n-th
``user.message``) plays script step n, a list of actions: {"text"}, {"tool", "input",
"output"}, {"wait": seconds} (a long one is what a cancel interrupts), {"error": message} (a
``session.error``), {"terminate": true} (``session.status_terminated``). Each text or tool is one
model request of ``usage`` tokens (default 1000 in, 100 out). The turn then goes idle
(``end_turn``, or ``stop`` when the action list says {"stop": reason})."""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

BETA = "managed-agents-2026-04-01"
BODY = web.RequestKey("body", dict)
USAGE = {
    "input_tokens": 1000,
    "output_tokens": 100,
    "cache_read_input_tokens": 0,
    "cache_creation_input_tokens": 0,
}


@dataclass
class Session:
    id: str
    body: dict[str, Any]
    status: str = "idle"
    archived: bool = False
    marker: str = ""
    turns: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)  # every event, in order
    listeners: list[asyncio.Queue[dict[str, Any]]] = field(default_factory=list)
    running: asyncio.Task[None] | None = None


class ManagedMock:
    def __init__(self, api_key: str = "sk-managed-test-7731") -> None:
        self.api_key = api_key
        self.scripts: dict[str, list[list[dict[str, Any]]]] = {}
        self.requests: list[dict[str, Any]] = []  # method, path, headers (no key), body
        self.agents: dict[str, dict[str, Any]] = {}
        self.environments: dict[str, dict[str, Any]] = {}
        self.sessions: dict[str, Session] = {}
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    def script(self, marker: str, turns: list[list[dict[str, Any]]]) -> None:
        self.scripts[marker] = turns

    async def __aenter__(self) -> ManagedMock:
        app = web.Application(middlewares=[self._gate])
        app.add_routes(
            [
                web.post("/v1/agents", self._create_agent),
                web.get("/v1/agents/{id}", self._get_agent),
                web.post("/v1/environments", self._create_environment),
                web.post("/v1/sessions", self._create_session),
                web.get("/v1/sessions/{id}", self._get_session),
                web.post("/v1/sessions/{id}/archive", self._archive),
                web.post("/v1/sessions/{id}/events", self._send),
                web.get("/v1/sessions/{id}/events/stream", self._stream),
            ]
        )
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *_: object) -> None:
        for session in self.sessions.values():
            if session.running is not None:
                session.running.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- the gate every request passes ------------------------------------------------------
    @web.middleware
    async def _gate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else None
        secret = ("x-api-key", "authorization")
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in secret}
        self.requests.append(
            {"method": request.method, "path": request.path, "headers": headers, "body": body}
        )
        bearer = request.headers.get("authorization", "").removeprefix("Bearer ")
        if self.api_key not in (request.headers.get("x-api-key"), bearer):
            return _error(401, "authentication_error", "invalid x-api-key")
        if BETA not in request.headers.get("anthropic-beta", ""):
            return _error(400, "invalid_request_error", f"this endpoint needs the {BETA} beta")
        request[BODY] = body or {}
        return await handler(request)

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):04d}"

    # -- agents and environments ------------------------------------------------------------
    async def _create_agent(self, request: web.Request) -> web.Response:
        body = request[BODY]
        if not body.get("name") or not body.get("model"):
            return _error(400, "invalid_request_error", "name and model are required")
        agent = {"type": "agent", "id": self._id("agent"), "version": 1, **body}
        agent["model"] = {"id": body["model"], "speed": "standard"}
        self.agents[agent["id"]] = agent
        return web.json_response(agent)

    async def _get_agent(self, request: web.Request) -> web.Response:
        agent = self.agents.get(request.match_info["id"])
        return web.json_response(agent) if agent else _error(404, "not_found_error", "no agent")

    async def _create_environment(self, request: web.Request) -> web.Response:
        env = {"type": "environment", "id": self._id("env"), **request[BODY]}
        self.environments[env["id"]] = env
        return web.json_response(env)

    # -- sessions ---------------------------------------------------------------------------
    async def _create_session(self, request: web.Request) -> web.Response:
        body = request[BODY]
        agent = body.get("agent")
        agent_id = agent if isinstance(agent, str) else (agent or {}).get("id")
        if agent_id not in self.agents or body.get("environment_id") not in self.environments:
            return _error(404, "not_found_error", "no such agent or environment")
        session = Session(self._id("sesn"), body)
        self.sessions[session.id] = session
        return web.json_response(self._view(session))

    def _session(self, request: web.Request) -> Session | None:
        return self.sessions.get(request.match_info["id"])

    async def _get_session(self, request: web.Request) -> web.Response:
        session = self._session(request)
        if session is None:
            return _error(404, "not_found_error", "no session")
        return web.json_response(self._view(session))

    async def _archive(self, request: web.Request) -> web.Response:
        session = self._session(request)
        if session is None:
            return _error(404, "not_found_error", "no session")
        session.archived = True
        return web.json_response(self._view(session))

    def _view(self, session: Session) -> dict[str, Any]:
        return {
            "type": "session",
            "id": session.id,
            "status": session.status,
            "title": session.body.get("title"),
            "environment_id": session.body.get("environment_id"),
            "resources": session.body.get("resources") or [],
            "archived_at": _now() if session.archived else None,
        }

    # -- events -----------------------------------------------------------------------------
    async def _send(self, request: web.Request) -> web.Response:
        session = self._session(request)
        if session is None:
            return _error(404, "not_found_error", "no session")
        if session.archived:
            return _error(400, "invalid_request_error", "the session is archived")
        sent = []
        for event in request[BODY].get("events") or []:
            event = {**event, "id": self._id("sevt"), "processed_at": _now()}
            sent.append(event)
            self._emit(session, event)
            if event.get("type") == "user.message":
                self._start_turn(session, event)
            elif event.get("type") == "user.interrupt":
                self._interrupt(session)
        return web.json_response({"data": sent})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        session = self._session(request)
        if session is None:
            return _error(404, "not_found_error", "no session")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        session.listeners.append(queue)
        try:
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), 5)
                except TimeoutError:
                    await response.write(b'event: ping\ndata: {"type": "ping"}\n\n')
                    continue
                data = json.dumps(event)
                await response.write(f"event: message\ndata: {data}\n\n".encode())
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            session.listeners.remove(queue)
        return response

    def _emit(self, session: Session, event: dict[str, Any]) -> None:
        if "id" not in event:
            event = {"id": self._id("sevt"), "processed_at": _now(), **event}
        session.events.append(event)
        for queue in session.listeners:
            queue.put_nowait(event)

    def _start_turn(self, session: Session, message: dict[str, Any]) -> None:
        if not session.marker:
            text = " ".join(b.get("text", "") for b in message.get("content") or [])
            session.marker = next((m for m in self.scripts if m in text), "")
        turns = self.scripts.get(session.marker) or [[{"text": "ok"}]]
        actions = turns[min(session.turns, len(turns) - 1)]
        session.turns += 1
        session.running = asyncio.ensure_future(self._play(session, actions))

    def _interrupt(self, session: Session) -> None:
        if session.running is not None and not session.running.done():
            session.running.cancel()
            session.status = "idle"
            self._emit(session, _idle("end_turn"))

    async def _play(self, session: Session, actions: list[dict[str, Any]]) -> None:
        session.status = "running"
        self._emit(session, {"type": "session.status_running"})
        stop = "end_turn"
        for action in actions:
            if "wait" in action:
                await asyncio.sleep(action["wait"])
            elif "stop" in action:
                stop = action["stop"]
            elif "error" in action:
                error = {"type": "unknown_error", "message": action["error"]}
                self._emit(session, {"type": "session.error", "error": error})
            elif "terminate" in action:
                session.status = "terminated"
                self._emit(session, {"type": "session.status_terminated"})
                return
            else:
                self._model_request(session, action)
        session.status = "idle"
        self._emit(session, _idle(stop))

    def _model_request(self, session: Session, action: dict[str, Any]) -> None:
        start = {"id": self._id("sevt"), "type": "span.model_request_start", "processed_at": _now()}
        self._emit(session, start)
        if "text" in action:
            content = [{"type": "text", "text": action["text"]}]
            self._emit(session, {"type": "agent.message", "content": content})
        usage = {**USAGE, **action.get("usage", {})}
        end = {"type": "span.model_request_end", "model_request_start_id": start["id"]}
        self._emit(session, {**end, "is_error": False, "model_usage": usage})
        if "tool" in action:
            use = {"id": self._id("sevt"), "processed_at": _now(), "type": "agent.tool_use"}
            self._emit(session, {**use, "name": action["tool"], "input": action.get("input", {})})
            result = [{"type": "text", "text": action.get("output", "")}]
            self._emit(
                session, {"type": "agent.tool_result", "tool_use_id": use["id"], "content": result}
            )

    def requests_to(self, path_end: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"].endswith(path_end)]

    def sent_events(self, session_id: str) -> list[dict[str, Any]]:
        return [e for e in self.sessions[session_id].events if e["type"].startswith("user.")]


def _idle(reason: str) -> dict[str, Any]:
    return {"type": "session.status_idle", "stop_reason": {"type": reason}}


def _error(status: int, kind: str, message: str) -> web.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status)


def _now() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


__all__ = ["ManagedMock"]
