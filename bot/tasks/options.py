"""Leading ``key=value`` options of a task command: ``/claude mode=readonly explain the build``."""

from __future__ import annotations

import re
from collections.abc import Collection
from enum import StrEnum
from typing import TypeVar

from bot.errors import UserInputError
from bot.models import ApprovalMode, Engine

KNOWN = (
    "model",
    "max_usd",
    "mode",
    "engine",
    "cwd",
    "worktree",
    "check",
    "subtasks",
    "preflight",
    "host",
)
_YES, _NO = ("yes", "y", "true", "on", "1"), ("no", "n", "false", "off", "0")
NONE = ("no", "none", "off")  # ``check=no``: no check, not even the repository's default
# key=value, key="a value" or key='a value' (a phone's “smart quotes” too), then spaces
_OPTION = re.compile(r"""([a-z_]+)=(?:"([^"]*)"|“([^”]*)”|'([^']*)'|(\S+))(?:\s+|$)""")


def split_options(text: str) -> tuple[dict[str, str], str]:
    """Options from the start of ``text`` and the prompt after them; unknown keys are errors.
    A value with spaces is quoted: ``check="pytest -q"``."""
    options: dict[str, str] = {}
    rest = text.strip()
    while match := _OPTION.match(rest):
        key = match.group(1)
        value = next(v for v in match.groups()[1:] if v is not None)
        if key not in KNOWN:
            raise UserInputError(
                "error.unknown_option", option=key, known=", ".join(f"{k}=" for k in KNOWN)
            )
        if key in options:  # which one was meant is not ours to guess
            raise UserInputError("error.duplicate_option", option=key)
        options[key] = value
        rest = rest[match.end() :]
    return options, rest.strip()


E = TypeVar("E", bound=StrEnum)


def _choice(options: dict[str, str], key: str, kind: type[E], default: E, error: str) -> E:
    """An enum-valued option, ``default`` when absent, a clear error naming it when unknown."""
    value = options.get(key)
    if value is None:
        return default
    try:
        return kind(value.lower())
    except ValueError:
        raise UserInputError(error, **{key: value}) from None


def flag(options: dict[str, str], key: str, default: bool) -> bool:
    """A yes/no option (``worktree=yes``)."""
    value = options.get(key)
    if value is None:
        return default
    if value.lower() in _YES:
        return True
    if value.lower() in _NO:
        return False
    raise UserInputError("error.bad_flag", option=key, value=value)


def approval_mode(options: dict[str, str], default: ApprovalMode) -> ApprovalMode:
    return _choice(options, "mode", ApprovalMode, default, "error.bad_mode")


def engine(options: dict[str, str], default: Engine, known: Collection[Engine]) -> Engine:
    """``engine=``: one of the engines this bot can run (executors/registry.py)."""
    value = options.get("engine", default).lower()
    if value not in known:
        raise UserInputError("error.engine_unavailable", engine=value)
    return value
