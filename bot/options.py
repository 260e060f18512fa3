"""Leading ``key=value`` options of a task command: ``/claude mode=readonly explain the build``."""

from __future__ import annotations

import re

from bot.errors import UserInputError
from bot.models import ApprovalMode, Engine

KNOWN = ("model", "max_usd", "mode", "engine", "cwd")
_OPTION = re.compile(r"([a-z_]+)=(\S+)")


def split_options(text: str) -> tuple[dict[str, str], str]:
    """Options from the start of ``text`` and the prompt after them; unknown keys are errors."""
    options: dict[str, str] = {}
    words = text.strip().split(" ")
    while words and (match := _OPTION.fullmatch(words[0])):
        key, value = match.groups()
        if key not in KNOWN:
            raise UserInputError("error.unknown_option", option=key,
                                 known=", ".join(f"{k}=" for k in KNOWN))
        options[key] = value
        words.pop(0)
    return options, " ".join(words).strip()


def approval_mode(options: dict[str, str], default: ApprovalMode) -> ApprovalMode:
    value = options.get("mode")
    if value is None:
        return default
    try:
        return ApprovalMode(value.lower())
    except ValueError:
        raise UserInputError("error.bad_mode", mode=value) from None


def engine(options: dict[str, str], default: Engine) -> Engine:
    value = options.get("engine")
    if value is None:
        return default
    try:
        return Engine(value.lower())
    except ValueError:
        raise UserInputError("error.engine_unavailable", engine=value) from None
