"""The owner's capabilities preamble: a file (a preset's ``preamble``, else
DETACH_PREAMBLE_FILE) read afresh at each turn's start, bounded, and told to the agent before
Detach's own. Which one a turn got is a transcript entry (``KIND``), for ``/export`` to name."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bot.errors import FileRefused
from executors.reading import read_capped

log = logging.getLogger(__name__)

KIND = "PreambleRead"  # bookkeeping: no item, no line a person reads
MAX_BYTES = 16_000


@dataclass(frozen=True, slots=True)
class OwnerPreamble:
    """The file a turn was to be told, and its text (None: refused, ``refused`` says why)."""

    path: Path
    text: str | None
    refused: str = ""

    def entry(self) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"path": str(self.path)}
        body |= {"chars": len(self.text)} if self.text is not None else {"refused": self.refused}
        return KIND, body


async def read_preamble(path: Path | None) -> OwnerPreamble | None:
    """The preamble file at ``path`` (None: the owner chose none); a file that cannot be read
    is refused, not fatal: the turn runs with Detach's preamble alone."""
    if path is None:
        return None
    try:
        # the owner's own path: a link they made is followed (an agent's file never is)
        data = await asyncio.to_thread(lambda: read_capped(path.resolve(), MAX_BYTES))
    except FileRefused as exc:
        log.warning("preamble %s not read: %s", path, exc.why)
        return OwnerPreamble(path, None, str(exc.why))
    text = data.decode("utf-8", errors="replace").strip()
    return OwnerPreamble(path, text or None, "" if text else "empty")


def said(body: dict[str, Any]) -> str:
    """A transcript entry as a task file's ``preamble:`` value."""
    path = " ".join(str(body.get("path")).splitlines())  # one line of a task file's block
    if "chars" in body:
        return f"{path} ({body['chars']} chars)"
    return f"{path} (not read: {body.get('refused')})"
