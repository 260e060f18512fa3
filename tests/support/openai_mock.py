"""A scripted OpenAI Responses API server on 127.0.0.1 (SSE), for the real codex binary.

Scripts are chosen by a substring of the conversation's user messages; the step used is the
number of model outputs (assistant messages and tool calls) already in the request's input, so a
script spans resumed turns. Steps: {"text"}, {"shell": cmd} (with "sandbox_permissions",
"justification" to ask for escalation), {"patch": text}, {"call": "ns.tool", "args": {...}}
(a function call; ``mcp__detach.start``: an MCP server's tool, in its namespace),
{"http_error": status} (its "error_body" as the body's "error"), {"delay": s}, {"echo": true};
"usage" on any step; "headers" on a streamed answer (e.g. ``x-codex-primary-used-percent``).
"""

from __future__ import annotations

import contextlib
import json
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tests.support.scripted_server import ScriptedServer

MODEL = "gpt-5.5"


class OpenAIMock(ScriptedServer):
    def __init__(self) -> None:
        super().__init__(_handler_for(self))
        self._ids = 0

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def write_codex_home(self, codex_home: Path) -> None:
        """The user's Codex config, pointed at this server, quiet: the production seam."""
        codex_home.mkdir(parents=True, exist_ok=True)
        (codex_home / "config.toml").write_text(
            f'model = "{MODEL}"\nmodel_provider = "mock"\ncheck_for_update_on_startup = false\n'
            "[analytics]\nenabled = false\n[features]\nplugins = false\n"
            "unbounded_connection_retries = false\n"
            '[model_providers.mock]\nname = "Mock"\n'
            f'base_url = "{self.base_url}"\nenv_key = "MOCK_API_KEY"\nwire_api = "responses"\n'
            "request_max_retries = 0\nstream_max_retries = 0\nstream_idle_timeout_ms = 20000\n"
        )

    def next_id(self) -> int:
        with self._lock:
            self._ids += 1
            return self._ids

    def choose(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        items = body.get("input") or []
        user_text = "\n".join(_text(i) for i in items if i.get("role") == "user")
        outputs = [
            i
            for i in items
            if i.get("type") in ("function_call", "custom_tool_call", "tool_search_call")
            or (i.get("type") == "message" and i.get("role") == "assistant")
        ]
        record = {
            "user_text": user_text,
            "input": items,
            "tools": [t.get("name") for t in body.get("tools") or []],
            "tool_specs": body.get("tools") or [],
        }
        steps = self.record(record, [{"text": "ok"}])
        return steps[min(len(outputs), len(steps) - 1)], record


def _text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(c.get("text", "") for c in content or [] if isinstance(c, dict))


def _handler_for(mock: OpenAIMock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._post()

        def _post(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            step, record = mock.choose(body)
            if step.get("delay"):
                time.sleep(min(float(step["delay"]), 30))
            if step.get("http_error"):
                data = json.dumps(
                    {"error": step.get("error_body")}
                    if step.get("error_body")
                    else {"error": {"message": "scripted failure", "type": "server_error"}}
                )
                self.send_response(int(step["http_error"]))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data.encode())
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            for name, value in (step.get("headers") or {}).items():
                self.send_header(name, str(value))
            self.end_headers()
            self.close_connection = True
            n = mock.next_id()
            self._event("response.created", {"response": {"id": f"resp_{n}"}})
            item = self._item(step, record, n)
            self._event("response.output_item.added", {"output_index": 0, "item": item})
            self._event("response.output_item.done", {"output_index": 0, "item": item})
            usage = {
                "input_tokens": 100,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 10,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 110,
                **(step.get("usage") or {}),
            }
            self._event(
                "response.completed",
                {"response": {"id": f"resp_{n}", "status": "completed", "usage": usage}},
            )

        def _item(self, step: dict[str, Any], record: dict[str, Any], n: int) -> dict[str, Any]:
            if step.get("shell"):
                arguments = {"cmd": step["shell"]}
                for extra in ("sandbox_permissions", "justification"):  # asking to escalate
                    if step.get(extra):
                        arguments[extra] = step[extra]
                return {
                    "type": "function_call",
                    "id": f"fc_{n}",
                    "call_id": f"call_{n}",
                    "name": "exec_command",
                    "arguments": json.dumps(arguments),
                }
            if step.get("search"):  # Codex's deferred tools (an MCP server's) looked up first
                return {
                    "type": "tool_search_call",
                    "id": f"ts_{n}",
                    "call_id": f"call_{n}",
                    "execution": "client",
                    "status": "completed",
                    "arguments": {"query": step["search"], "limit": 8},
                }
            if step.get("call"):  # any other tool by name: "ns.tool", or "namespace" beside
                namespace, _, name = step["call"].rpartition(".")
                namespace = step.get("namespace") or namespace
                return {
                    "type": "function_call",
                    "id": f"fc_{n}",
                    "call_id": f"call_{n}",
                    "name": name,
                    "arguments": json.dumps(step.get("args") or step.get("arguments") or {}),
                    **({"namespace": namespace} if namespace else {}),
                }
            if step.get("patch"):
                return {
                    "type": "custom_tool_call",
                    "id": f"ctc_{n}",
                    "call_id": f"call_{n}",
                    "name": "apply_patch",
                    "input": step["patch"],
                }
            text = step.get("text", "ok")
            if step.get("echo"):
                text = f"ECHO items={len(record['input'])} user={record['user_text'][-300:]}"
            return {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }

        def _event(self, name: str, payload: dict[str, Any]) -> None:
            self.wfile.write(
                f"event: {name}\ndata: {json.dumps({'type': name, **payload})}\n\n".encode()
            )
            self.wfile.flush()

    return Handler
