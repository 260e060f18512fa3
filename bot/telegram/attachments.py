"""Files sent to the bot (a document or a photo, with a task command, as a plain message or as a
reply): checked against the size cap, downloaded into a staging directory, and later moved
into the task's directory under ``.detach/attachments/`` (``bot.tasks.creation``)."""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aiogram import Bot
from aiogram.exceptions import AiogramError
from aiogram.types import Message

from bot.errors import UserInputError

log = logging.getLogger(__name__)
ATTACHMENTS = Path(".detach") / "attachments"  # inside the task's directory
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class Incoming:
    file_id: str
    name: str
    size: int | None


def incoming(message: Message) -> Incoming | None:
    """The file a message carries: a document, or the largest size of a photo."""
    if message.document is not None:
        doc = message.document
        return Incoming(
            doc.file_id, doc.file_name or f"document-{doc.file_unique_id}", doc.file_size
        )
    if message.photo:
        photo = max(message.photo, key=lambda p: p.width * p.height)
        return Incoming(photo.file_id, "photo.jpg", photo.file_size)  # staged with a unique prefix
    return None


def safe_name(name: str) -> str:
    """A file name that stays one name inside the attachments directory: no separators, no
    leading dots, a bounded length; a short unique prefix, so files never overwrite."""
    base = _UNSAFE.sub("_", Path(name).name).lstrip("._")[-80:] or "file"
    return f"{uuid.uuid4().hex[:6]}-{base}"


async def stage(bot: Bot, item: Incoming, staging: Path, max_bytes: int) -> Path:
    """Download ``item`` into ``staging``; a file over ``max_bytes`` (by what Telegram says,
    and by what arrived) is refused with a clear reason and nothing is kept."""
    limit_mb = max_bytes / 1024 / 1024
    if item.size is not None and item.size > max_bytes:
        raise UserInputError(
            "error.attachment_too_big",
            name=item.name,
            mb=f"{item.size / 1024 / 1024:.1f}",
            limit=f"{limit_mb:g}",
        )
    staging.mkdir(parents=True, exist_ok=True)
    target = staging / safe_name(item.name)
    try:
        await bot.download(item.file_id, destination=target, timeout=120)
    except AiogramError as exc:
        target.unlink(missing_ok=True)
        raise UserInputError("error.attachment_failed", name=item.name, reason=str(exc)) from exc
    if target.stat().st_size > max_bytes:
        size = target.stat().st_size
        target.unlink()
        raise UserInputError(
            "error.attachment_too_big",
            name=item.name,
            mb=f"{size / 1024 / 1024:.1f}",
            limit=f"{limit_mb:g}",
        )
    target.chmod(0o644)
    return target


@contextlib.asynccontextmanager
async def staged(message: Message, tasks: Staging) -> AsyncIterator[list[Path]]:
    """The message's file, staged (none: an empty list) for the block; what the block did
    not move into a task (a refused prompt, a message handled twice) is deleted after it."""
    item = incoming(message)
    if item is None or message.bot is None:
        yield []
        return
    files = [await stage(message.bot, item, tasks.attachments_staging, tasks.max_attachment_bytes)]
    try:
        yield files
    finally:
        for path in files:
            path.unlink(missing_ok=True)


class Staging(Protocol):
    attachments_staging: Path
    max_attachment_bytes: int


def mention(staged: list[Path]) -> str:
    """What the agent is told about the files (paths relative to its working directory)."""
    if not staged:
        return ""
    paths = "\n".join(f"- {ATTACHMENTS / p.name}" for p in staged)
    return f"\n\nAttached by the user (in the working directory):\n{paths}"


def place(staged: list[Path], cwd: Path) -> None:
    """Move staged files into ``cwd/.detach/attachments/``; where an agent made either of
    those a link or a file, nothing is placed (the files are not written where it points)."""
    if not staged:
        return
    target = cwd
    for part in ATTACHMENTS.parts:
        target = target / part
        with contextlib.suppress(FileExistsError):
            target.mkdir()
        if target.is_symlink() or not target.is_dir():
            log.warning("%s is not a directory of its own: attachments not placed", target)
            return
    for path in staged:
        shutil.move(path, target / path.name)  # staging may be on another filesystem
