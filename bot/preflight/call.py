"""The preflight's one call: the claude CLI in print mode with a JSON answer, no tools, in an
empty directory of its own (it reads nothing but its prompt), bounded by a timeout."""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import signal
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass

from bot.errors import PreflightFailed
from bot.models import Phrase, Preset
from executors.process import spawn
from executors.shield import shielded
from executors.tree import stop_tree

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0
OUTPUT_MAX = 64_000  # bytes of the CLI's answer read


@dataclass(frozen=True, slots=True)
class Answer:
    """The model's text and what the call cost (None: the CLI did not say)."""

    text: str
    cost_usd: float | None


class ClaudePreflight:
    """Runs ``claude -p --output-format json --tools ""`` (no MCP servers, no session kept)
    with ``preset``'s model; the prompt goes in on stdin (it can never be read as a flag).
    ``env``: the agents' environment (no bot settings, no secrets)."""

    def __init__(
        self, binary: str | None, env: Mapping[str, str], timeout_s: float = TIMEOUT_S
    ) -> None:
        self._binary = binary
        self._env = dict(env)
        self.timeout_s = timeout_s

    def argv(self, binary: str, preset: Preset) -> list[str]:
        return [
            binary,
            "-p",
            "--output-format",
            "json",
            "--tools",
            "",
            "--strict-mcp-config",
            "--no-session-persistence",
            "--model",
            preset.model,
            *preset.args,
        ]

    async def ask(self, prompt: str, preset: Preset) -> Answer:
        """The model's answer to ``prompt``; ``PreflightFailed`` if the CLI is missing, fails,
        says its result is an error, or takes longer than ``timeout_s`` (it is stopped then)."""
        binary = shutil.which(self._binary or "claude")
        if binary is None:
            raise PreflightFailed("claude CLI not found", Phrase("preflight.why.no_cli"))
        try:
            async with asyncio.timeout(self.timeout_s):
                out = await self._run(binary, prompt, preset)
        except TimeoutError:
            raise PreflightFailed(
                f"no answer within {self.timeout_s:g} s", timed_out(self.timeout_s)
            ) from None
        return _result(out)

    async def _run(self, binary: str, prompt: str, preset: Preset) -> bytes:
        with tempfile.TemporaryDirectory(prefix="detach-preflight-") as empty:
            try:
                proc = await spawn(self.argv(binary, preset), empty, self._env)
            except OSError as exc:
                raise PreflightFailed(f"cannot start claude: {exc}", FAILED) from exc
            try:
                out, _ = await proc.communicate(prompt.encode())
            finally:
                await shielded(stop_tree(proc, 1.0, signal.SIGTERM))
        return out[:OUTPUT_MAX]


FAILED = Phrase("preflight.why.failed")  # the call itself failed: its words are in the log


def timed_out(timeout_s: float) -> Phrase:
    return Phrase("preflight.why.timeout", {"seconds": f"{timeout_s:g}"})


def _result(out: bytes) -> Answer:
    """The result object ``--output-format json`` prints on one line."""
    try:
        data = json.loads(out.decode(errors="replace").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise PreflightFailed("claude printed no JSON result") from None
    if not isinstance(data, dict) or data.get("type") != "result":
        raise PreflightFailed("claude printed no result")
    cost = data.get("total_cost_usd")
    cost_usd = float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None
    if data.get("is_error") or not isinstance(data.get("result"), str):
        raise PreflightFailed(f"claude failed: {str(data.get('result'))[:200]}", FAILED)
    return Answer(data["result"], cost_usd)
