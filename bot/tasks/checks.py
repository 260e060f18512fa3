"""A repository's default check: ``check = "make test"`` in ``.detach.toml`` at its root. It is
the repository's word, not the owner's: it runs only once the owner approved that exact command
for that repository (``bot.approvals.consent``), so it must fit whole in one message. The file is
read as an agent may have planted it (``executors.reading``): a link, a FIFO, a device or a file
over ``MAX_BYTES`` is refused, never followed or waited on."""

from __future__ import annotations

import tomllib
from pathlib import Path

from bot.errors import FileRefused, Unreadable, UserInputError, clean
from bot.tasks.options import NONE
from executors.reading import read_capped

CONFIG_NAME = ".detach.toml"
MAX_BYTES = 64 * 1024
MAX_CHECK_CHARS = 2000  # a repository's check is shown whole in one approval message


def given_check(given: str) -> str | None:
    """An explicit check (``check=``, ``--check``): the command, or None for ``no``."""
    text = clean(given).strip()
    return None if text.lower() in (*NONE, "") else text


def repository_check(top: Path) -> str | None:
    """The ``check`` of ``top/.detach.toml``; None without the file or the key. A file that is
    not valid TOML, or a check that is not a string, is a clear refusal naming the file; one
    that cannot be read as a small regular file is ``FileRefused`` (the caller may go on
    without it). Blocks on the disk only: async callers run it in a thread."""
    path = top / CONFIG_NAME
    try:
        raw = read_capped(path, MAX_BYTES)
    except FileRefused as exc:
        if exc.why is Unreadable.MISSING:
            return None
        raise
    try:
        data = tomllib.loads(raw.decode("utf-8", errors="replace"))
    except tomllib.TOMLDecodeError as exc:
        raise UserInputError("error.detach_toml", path=str(path), reason=str(exc)) from exc
    check = data.get("check")
    if check is None:
        return None
    if not isinstance(check, str) or not check.strip():
        raise UserInputError("error.detach_toml_check_empty", path=str(path))
    length = len(check.strip().encode("utf-16-le")) // 2  # as Telegram counts a message
    if length > MAX_CHECK_CHARS:
        raise UserInputError(
            "error.detach_toml_check_long", path=str(path), length=length, most=MAX_CHECK_CHARS
        )
    return check.strip()
