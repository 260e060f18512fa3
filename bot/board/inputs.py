"""What a board request carries, bounded before anything uses it: a task id from the path (out
of range is ``TaskNotFound``, like any other missing task), numbers from the query and the body
(0 to 2**63-1, else ``Malformed``), and a JSON body (nested at most ``depth`` levels, counted in
one linear pass before the recursive parse, else ``Malformed``)."""

from __future__ import annotations

import itertools
import json
import operator
import re
from typing import Any

from aiohttp import web

from bot.errors import DetachError, TaskNotFound

INT_MAX = 2**63 - 1  # what SQLite and PostgreSQL store
# a JSON string, possessive so an unterminated one costs one linear pass, not one per quote
_STRING = re.compile(r'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]++")
_STEPS = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")  # an opening bracket 2, a closing one 0


class Malformed(DetachError):
    """A request's ``field`` the board cannot take (answered 400)."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


def task_id(request: web.Request) -> int:
    """The path's ``{id}`` (digits by its route). Raises TaskNotFound beyond ``INT_MAX``."""
    raw = request.match_info["id"]
    found = _number(raw)
    if found is None:
        raise TaskNotFound(raw[:20])
    return found


def query_int(request: web.Request, name: str, default: int) -> int:
    """The query's ``name``, or ``default`` when absent. Raises Malformed."""
    raw = request.query.get(name)
    return default if raw is None else _bounded(raw, name)


def body_int(body: dict[str, Any], name: str, default: int) -> int:
    """The body's ``name`` (a JSON number or a string of digits), or ``default`` when absent.
    Raises Malformed."""
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise Malformed(name)
    return _bounded(str(value), name)


def body_flag(body: dict[str, Any], name: str) -> bool | None:
    """The body's ``name``, a JSON true or false, or None when absent. Raises Malformed."""
    value = body.get(name)
    if value is not None and not isinstance(value, bool):
        raise Malformed(name)
    return value


async def read_json(request: web.Request, depth: int) -> dict[str, Any]:
    """The body's JSON object ({} for any other JSON value). Raises Malformed (too deep, not
    JSON, not UTF-8) or aiohttp's HTTPRequestEntityTooLarge (beyond ``client_max_size``)."""
    try:
        text = await request.text()
    except UnicodeDecodeError as exc:
        raise Malformed("body") from exc
    if nested_deeper(text, depth):
        raise Malformed("body")
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise Malformed("body") from exc
    return body if isinstance(body, dict) else {}


def nested_deeper(text: str, depth: int) -> bool:
    """Whether JSON ``text`` nests arrays and objects deeper than ``depth``: its brackets
    outside strings, summed in C (after the i-th, the depth is the sum of i steps minus i)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    if len(brackets) <= depth:
        return False
    steps = brackets.encode().translate(_STEPS)
    return max(map(operator.sub, itertools.accumulate(steps), itertools.count(1))) > depth


def _bounded(raw: str, name: str) -> int:
    found = _number(raw)
    if found is None:
        raise Malformed(name)
    return found


def _number(raw: str) -> int | None:
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19:
        return None
    value = int(raw)
    return value if value <= INT_MAX else None
