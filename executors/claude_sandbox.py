"""Claude Code's sandbox for a sandboxed turn, as the CLI's inline ``--settings`` (measured with
2.1.197, docs/sandbox.md), and the turn's ``--mcp-config`` file in the bot's private directory."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from bot.models import TurnSpec
from executors.denied import outside, secret_names


def sandbox_settings(spec: TurnSpec, environ: Mapping[str, str] | None = None) -> str:
    """``--settings`` for a sandboxed turn (measured with 2.1.197, docs/sandbox.md): Bash runs in
    bubblewrap, writable only in the task's directory, and needs no approval there; a command the
    agent wants to run outside it (``dangerouslyDisableSandbox``), a host not in the list and an
    edit outside the directory come to the permission prompt; no sandbox, no turn. The turn's
    denied paths are hidden from its commands (``filesystem.denyRead``: a tmpfs or /dev/null
    over each, the task's directory bound back) and from the Read tool, and kept from the
    edit tools (deny rules, which cannot be lifted inside a denied directory: they name what
    lies around the task's directory); the API keys and tokens of ``environ`` (and
    ``spec.secret_names``, whatever their names) are unset for its
    commands (``credentials.envVars``), while the CLI itself keeps them to reach its model."""
    settings: dict[str, Any] = {
        "enabled": True,
        "autoAllowBashIfSandboxed": True,
        "failIfUnavailable": True,
        "allowUnsandboxedCommands": True,
        "network": {"allowedDomains": list(spec.sandbox_domains)},
    }
    if spec.deny_read:
        settings["filesystem"] = {"denyRead": [str(p) for p in spec.deny_read]}
    hidden = secret_names(environ or {}, spec.secret_names)
    if hidden:
        settings["credentials"] = {"envVars": [{"name": n, "mode": "deny"} for n in hidden]}
    rules = [rule for p in outside(spec.deny_read, spec.cwd) for rule in _deny_rules(p)]
    permissions = {"permissions": {"deny": rules}} if rules else {}
    return json.dumps({"sandbox": settings, **permissions})


def _deny_rules(path: Path) -> tuple[str, str]:
    """Read and Edit deny rules for an absolute path (``//`` marks one in 2.1.197's rule
    syntax): not read, and not written either (with the task's directory its home, a Write of
    ``~/.ssh/authorized_keys`` was accepted without a tap)."""
    pattern = f"/{path}/**" if path.is_dir() else f"/{path}"
    return f"Read({pattern})", f"Edit({pattern})"


@contextlib.contextmanager
def mcp_config_file(spec: TurnSpec) -> Iterator[Path | None]:
    """The turn's MCP servers as a ``--mcp-config`` file readable by this user only, in the
    bot's private directory (``spec.private_dir``: not in /tmp, where a sandboxed command reads
    what this user wrote), removed after the turn."""
    if not spec.mcp_servers:
        yield None
        return
    servers = {
        s.name: {"type": "stdio", "command": s.command, "args": list(s.args), "env": dict(s.env)}
        for s in spec.mcp_servers
    }
    fd, name = tempfile.mkstemp(prefix="detach-mcp-", suffix=".json", dir=spec.private_dir)
    try:
        with os.fdopen(fd, "w") as out:  # mkstemp: mode 0600
            json.dump({"mcpServers": servers}, out)
        yield Path(name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(name)
