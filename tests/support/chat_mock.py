"""A scripted OpenAI Chat Completions server on 127.0.0.1 (streaming SSE), for the local engine.

Scripts are chosen by a substring of the conversation's first user message; the step used is the
number of assistant messages already in the request, so one script spans a conversation across
resumed turns. Steps: {"text"}; {"tools": [{"name", "args"}]} (may carry "text"; "raw_args"
instead of "args" sends that string as the arguments; "piece": n streams them n characters a
chunk); {"error": status, "message",
"retry_after", "times"} (the first "times" requests of that step get the error, then the step's
"then" is used); {"delay": seconds} before answering; "pace": seconds between streamed pieces
(without it, pieces go 64 to a write, as from a fast server); "usage" {"prompt_tokens",
"completion_tokens"} on any step (default: a small fixed usage; "usage": null sends none).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support.scripted_server import ScriptedServer, send_json

MODEL = "mock-model"
DEFAULT_USAGE = {"prompt_tokens": 1000, "completion_tokens": 100}


class ChatMock(ScriptedServer):
    MARKER_FIELD = "first_user_text"

    def __init__(self) -> None:
        super().__init__(_handler_for(self))
        self._hits: Counter[tuple[str, int]] = Counter()

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    def choose(self, body: dict[str, Any], auth: str) -> tuple[dict[str, Any], dict[str, Any]]:
        messages = body.get("messages") or []
        first = next((m for m in messages if m.get("role") == "user"), {})
        record = {
            "first_user_text": str(first.get("content") or ""),
            "messages": messages,
            "model": body.get("model"),
            "tools": [t["function"]["name"] for t in body.get("tools") or []],
            "authorization": auth,
            "max_tokens": body.get("max_tokens"),
            "stream": body.get("stream"),
        }
        index = sum(1 for m in messages if m.get("role") == "assistant")
        steps = self.record(record, [{"text": "ok"}])
        step = steps[min(index, len(steps) - 1)]
        key = (record["first_user_text"], index)
        with self._lock:
            self._hits[key] += 1
            hits = self._hits[key]
        if step.get("error") and hits > int(step.get("times", 10**9)):
            step = step.get("then") or {"text": "ok"}
        return step, record


def _handler_for(mock: ChatMock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: Any) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802
            if self.path.rstrip("/").endswith("/models"):
                return self._json(
                    200, {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
                )
            return self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:  # noqa: N802
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._post()  # the client may go away mid-reply (cancel tests)

        def _post(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self.path.endswith("/chat/completions"):
                return self._json(404, {"error": {"message": f"no route {self.path}"}})
            step, _record = mock.choose(body, self.headers.get("Authorization") or "")
            if step.get("delay"):
                time.sleep(min(float(step["delay"]), 30))
            if step.get("error"):
                headers = {"Retry-After": str(step["retry_after"])} if "retry_after" in step else {}
                message = step.get("message", "scripted error")
                return self._json(int(step["error"]), {"error": {"message": message}}, headers)
            self._stream(step, str(body.get("model") or MODEL))

        def _json(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> None:
            send_json(self, status, payload, headers)

        def _chunk(self, model: str, delta: dict[str, Any] | None, **extra: Any) -> None:
            self._pending.append(_event(model, delta, **extra))
            if len(self._pending) >= self._batch:
                self._send()

        def _send(self) -> None:
            """The pieces so far, in one write (a fast endpoint: many pieces per packet)."""
            self.wfile.write(b"".join(self._pending))
            self.wfile.flush()
            self._pending.clear()
            time.sleep(self._pace_s)

        def _stream(self, step: dict[str, Any], model: str) -> None:
            self._pending: list[bytes] = []
            self._pace_s = float(step.get("pace") or 0)  # between pieces: a slow trickle
            self._batch = 1 if self._pace_s else 64
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            self._chunk(model, {"role": "assistant", "content": ""}, finish_reason=None)
            text = str(step.get("text") or "")
            for start in range(0, len(text), 20):  # the text in pieces, as a model streams it
                self._chunk(model, {"content": text[start : start + 20]}, finish_reason=None)
            for n, tool in enumerate(step.get("tools") or []):
                raw = tool["raw_args"] if "raw_args" in tool else json.dumps(tool.get("args", {}))
                head = {"index": n, "id": f"call_{n}_{time.monotonic_ns()}", "type": "function"}
                first = {**head, "function": {"name": tool["name"], "arguments": raw[:10]}}
                self._chunk(model, {"tool_calls": [first]}, finish_reason=None)
                size = int(tool.get("piece") or len(raw) or 1)  # the rest in pieces of this size
                for start in range(10, len(raw), size):
                    rest = {"index": n, "function": {"arguments": raw[start : start + size]}}
                    self._chunk(model, {"tool_calls": [rest]}, finish_reason=None)
            done = "tool_calls" if step.get("tools") else "stop"
            self._chunk(model, {}, finish_reason=done)
            usage = step.get("usage", DEFAULT_USAGE)
            if usage is not None:
                total = usage["prompt_tokens"] + usage["completion_tokens"]
                self._chunk(model, None, usage={**usage, "total_tokens": total})
            self._pending.append(b"data: [DONE]\n\n")
            self._send()

    return Handler


def _event(model: str, delta: dict[str, Any] | None, **extra: Any) -> bytes:
    payload: dict[str, Any] = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [] if delta is None else [{"index": 0, "delta": delta, **extra}],
    }
    if delta is None:
        payload["usage"] = extra["usage"]
    return f"data: {json.dumps(payload)}\n\n".encode()
