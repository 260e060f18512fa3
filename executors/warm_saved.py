"""Each engine's last warm start (``warm_template``), kept in the bot's private directory
(0600) so the next run of the bot warms it again at start-up."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from bot.models import ApprovalMode, TurnSpec

_KEPT = (  # what a claude start is made of (never a task's: ``warm_template`` removed those)
    "cwd",
    "model",
    "append_system_prompt",
    "allowed_tools",
    "approval_mode",
    "extra_args",
    "max_budget_usd",
    "process_tag",
    "sandbox_domains",
    "private_dir",
    "nice",
    "deny_read",
    "secret_names",
)


def save(path: Path, engine: str, template: TurnSpec) -> None:
    kept = {name: getattr(template, name) for name in _KEPT}
    data = _read(path)
    data[engine] = json.loads(json.dumps(kept, default=str))
    fd = os.open(f"{path}.new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(data, out)
    os.replace(f"{path}.new", path)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load(path: Path, engine: str) -> TurnSpec | None:
    kept = _read(path).get(engine)
    if not isinstance(kept, dict) or set(kept) != set(_KEPT):
        return None
    try:
        return TurnSpec(
            task_id=0,
            turn_id=0,
            prompt="",
            cwd=Path(kept["cwd"]),
            model=kept["model"],
            append_system_prompt=kept["append_system_prompt"],
            allowed_tools=tuple(kept["allowed_tools"]),
            approval_mode=ApprovalMode(kept["approval_mode"]),
            extra_args=tuple(kept["extra_args"]),
            max_budget_usd=kept["max_budget_usd"],
            process_tag=kept["process_tag"],
            sandbox_domains=tuple(kept["sandbox_domains"]),
            private_dir=Path(kept["private_dir"]) if kept["private_dir"] else None,
            nice=int(kept["nice"]),
            deny_read=tuple(Path(p) for p in kept["deny_read"]),
            secret_names=tuple(kept["secret_names"]),
        )
    except (TypeError, ValueError):
        return None
