"""What the scripted model servers share: a threaded HTTP server on 127.0.0.1:0, per-marker
scripts and the requests received."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self


def send_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    payload: dict[str, Any],
    headers: dict[str, str] | None = None,
) -> None:
    """A whole JSON answer (with extra ``headers``) that closes the connection."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Connection", "close")
    handler.end_headers()
    handler.wfile.write(data)
    handler.close_connection = True


class ScriptedServer:
    MARKER_FIELD = "user_text"  # the request record field a script's marker is matched in

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.scripts: dict[str, list[dict[str, Any]]] = {}
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def script(self, marker: str, steps: list[dict[str, Any]]) -> None:
        with self._lock:
            self.scripts[marker] = steps

    def requests_for(self, marker: str) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if marker in r[self.MARKER_FIELD]]

    def record(self, record: dict[str, Any], default: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Keep a request (with ``at``, when it came: time.monotonic()); the script whose
        marker it carries (or ``default``)."""
        with self._lock:
            record["at"] = time.monotonic()
            self.requests.append(record)
            return next(
                (s for k, s in self.scripts.items() if k in record[self.MARKER_FIELD]), default
            )
