"""Writing to an agent's stdin, one JSON object per line (Claude Code's stream-json, Codex's
JSON-RPC): writers never interleave, and a pipe the agent closed by exiting is no error here."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any


class JsonLines:
    """Writes one JSON object per line to an agent's stdin; writes from concurrent tasks are
    serialised, and a closed pipe (the agent exited) is not an error here."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self._proc = proc
        self._lock = asyncio.Lock()

    async def write(self, message: dict[str, Any]) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            return
        async with self._lock:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                stdin.write((json.dumps(message) + "\n").encode())
                await stdin.drain()

    def close(self) -> None:
        if self._proc.stdin is not None and not self._proc.stdin.is_closing():
            self._proc.stdin.close()
