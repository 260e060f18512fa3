"""Why Codex's sandbox cannot run a command here, read from Codex's own error (``codex sandbox
-- /bin/true`` at start-up). Codex refuses to create its helper binaries (the
``codex-linux-sandbox`` its bubblewrap runs) under the temporary directory when that holds
``CODEX_HOME``; without user namespaces bubblewrap cannot start at all."""

from __future__ import annotations

import re
from collections.abc import Mapping

from bot.models import Phrase

_HELPERS = re.compile(r"Refusing to create helper binaries under temporary dir \"([^\"]*)\"")
_NAMESPACES = re.compile(r"namespace|uid map|unprivileged_userns", re.IGNORECASE)


def refusal(output: str, env: Mapping[str, str]) -> Phrase:
    """What failed, as /status and a sandboxed task's acknowledgement say it."""
    helpers = _HELPERS.search(output)
    if helpers is not None:
        home = env.get("CODEX_HOME") or f"{env.get('HOME', '~')}/.codex"
        return Phrase("probe.codex_tmp_helpers", {"tmpdir": helpers[1], "codex_home": home})
    if _NAMESPACES.search(output):
        return Phrase("probe.codex_no_userns")
    lines = output.strip().splitlines()
    return Phrase("probe.codex_sandbox_failed", {"detail": lines[-1][-200:] if lines else "–"})
