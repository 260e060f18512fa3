"""A scripted Anthropic Messages API server on 127.0.0.1 (streaming SSE), for the real claude CLI.

Scripts are chosen by a substring of the conversation's first user message; the step used is the
number of assistant messages already in the request, so one script spans a conversation across
resumed turns. Steps: {"text"}, {"tool_use": {name, input}} (may carry "text"),
{"error": {status, type, message, headers}}, {"echo": true}, {"stall": seconds}; options
"delay", "usage", "headers" (of a streamed answer: e.g. ``anthropic-ratelimit-unified-*``), and
"times" + "then" (the first "times" requests of the step get it, later
ones the "then" step).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.scripted_server import ScriptedServer, send_json


class AnthropicMock(ScriptedServer):
    MARKER_FIELD = "first_user_text"

    def __init__(self) -> None:
        super().__init__(_handler_for(self))
        self._hits: dict[int, int] = {}  # by the id of a script's step

    @property
    def base_url(self) -> str:
        return self.root_url

    def env(self) -> dict[str, str]:
        return {
            "ANTHROPIC_BASE_URL": self.base_url,
            "ANTHROPIC_API_KEY": "sk-ant-mock",
            "CLAUDE_CODE_MAX_RETRIES": "0",
        }

    # -- used by the handler ------------------------------------------------------------------
    def choose(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        messages = body.get("messages") or []
        first = next((m for m in messages if m.get("role") == "user"), {})
        record = {
            "first_user_text": _text(first.get("content")),
            "last_user_text": _text(_last_user(messages)),
            "roles": [m.get("role") for m in messages],
            "messages": messages,
            "model": body.get("model"),
            "system": json.dumps(body.get("system")),
            "tools": [t.get("name") for t in body.get("tools") or []],
        }
        step_index = sum(1 for m in messages if m.get("role") == "assistant")
        steps = self.record(record, [{"text": "ok"}])
        step = steps[min(step_index, len(steps) - 1)] if steps else {"text": "ok"}
        if "times" in step:  # the first "times" requests of this step get it, then "then"
            key = id(step)  # this script's step, whatever a resumed session sends first
            with self._lock:
                self._hits[key] = self._hits.get(key, 0) + 1
                if self._hits[key] > int(step["times"]):
                    step = step.get("then") or {"text": "ok"}
        return step, record


def _last_user(messages: list[dict[str, Any]]) -> Any:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message.get("content")
    return None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if block.get("type") == "text":
                parts.append(block.get("text", ""))
            elif block.get("type") == "tool_result":
                parts.append(_text(block.get("content")))
        return "\n".join(parts)
    return ""


def _blocks(step: dict[str, Any], record: dict[str, Any]) -> list[dict[str, Any]]:
    if step.get("echo"):
        text = (
            f"ECHO roles={','.join(r or '?' for r in record['roles'])} "
            f"last={record['last_user_text'][-200:]}"
        )
        return [{"type": "text", "text": text}]
    blocks: list[dict[str, Any]] = []
    if step.get("text"):
        blocks.append({"type": "text", "text": step["text"]})
    if step.get("tool_use"):
        tool = step["tool_use"]
        blocks.append(
            {
                "type": "tool_use",
                "id": f"toolu_mock{uuid.uuid4().hex[:20]}",
                "name": tool["name"],
                "input": tool["input"],
            }
        )
    return blocks or [{"type": "text", "text": "ok"}]


def _handler_for(mock: AnthropicMock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802 (preconnect)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # noqa: N802
            self._json(
                404, {"type": "error", "error": {"type": "not_found_error", "message": "not found"}}
            )

        def do_POST(self) -> None:  # noqa: N802
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._post()  # the CLI may be stopped mid-reply (cancel tests)

        def _post(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if "count_tokens" in self.path:
                return self._json(200, {"input_tokens": 42})
            if not self.path.startswith("/v1/messages"):
                return self._json(
                    404,
                    {"type": "error", "error": {"type": "not_found_error", "message": self.path}},
                )
            step, record = mock.choose(body)
            if step.get("delay"):
                time.sleep(min(float(step["delay"]), 30))
            if step.get("error"):
                err = step["error"]
                return self._json(
                    int(err.get("status", 500)),
                    {
                        "type": "error",
                        "error": {
                            "type": err.get("type", "api_error"),
                            "message": err.get("message", "boom"),
                        },
                    },
                    err.get("headers"),
                )
            self._stream(step, _blocks(step, record), body.get("model") or "claude-mock")

        def _json(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            send_json(self, status, payload, headers)

        def _event(self, name: str, payload: dict[str, Any]) -> None:
            self.wfile.write(f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode())
            self.wfile.flush()

        def _stream(self, step: dict[str, Any], blocks: list[dict[str, Any]], model: str) -> None:
            usage = {"input_tokens": 100, "output_tokens": 20, **(step.get("usage") or {})}
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            for name, value in (step.get("headers") or {}).items():
                self.send_header(name, str(value))
            self.end_headers()
            self.close_connection = True
            msg_id = f"msg_mock{uuid.uuid4().hex[:16]}"
            self._event(
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": msg_id,
                        "type": "message",
                        "role": "assistant",
                        "model": model,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1},
                    },
                },
            )
            if step.get("stall"):
                mock._stop.wait(min(float(step["stall"]), 60))
                return
            for index, block in enumerate(blocks):
                self._block(index, block)
            stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
            self._event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": usage["output_tokens"]},
                },
            )
            self._event("message_stop", {"type": "message_stop"})

        def _block(self, index: int, block: dict[str, Any]) -> None:
            if block["type"] == "text":
                self._event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
                text = block["text"]
                for i in range(0, len(text), 256):
                    self._event(
                        "content_block_delta",
                        {
                            "type": "content_block_delta",
                            "index": index,
                            "delta": {"type": "text_delta", "text": text[i : i + 256]},
                        },
                    )
            else:
                start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                self._event(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": start},
                )
                self._event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {
                            "type": "input_json_delta",
                            "partial_json": json.dumps(block["input"]),
                        },
                    },
                )
            self._event("content_block_stop", {"type": "content_block_stop", "index": index})

    return Handler
