"""Files sent without words: held, not started. The bot asks "What should I do with it?" (one
message, with a Drop button); a reply to that question with words starts the task (or the
follow-up, for a file sent as a reply to a task) with the files. Nothing starts on its own.

Held files wait in ``<data dir>/held/<chat>_<message>/`` (the message is the
user's file message) beside a small ``held.json``; one unanswered for ``HOLD_S`` (24 h) is
dropped by the periodic clean-up (``prune``). The question carries the held set's key in its
button, so a reply to it (whose ``reply_to_message`` holds the button) finds the files."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from bot.errors import FileRefused
from bot.telegram.callbacks import Id
from bot.telegram.markup import CallbackData, Keyboard
from executors.reading import read_capped_soon

HOLD_S = 24 * 3600.0  # an unanswered file is dropped after this long
META = "held.json"
META_BYTES = 64 * 1024


class HeldButton(StrEnum):
    """What the held files' question's button does (``HeldAction.action``)."""

    DROP = "drop"


class HeldAction(CallbackData, prefix="h"):
    """The question's button: Drop the files held for the user's message ``message_id``;
    ``task_id``: the task a file sent as a reply belongs to (0: a new task)."""

    action: HeldButton
    message_id: Id
    task_id: Id = 0


@dataclass(frozen=True, slots=True)
class Held:
    """What a user sent without words: the files, the command (``detach``, ``claude`` ...)
    and its options as typed, and the task a reply was for."""

    files: list[Path]
    command: str
    text: str
    task_id: int | None
    locale: str
    question_row: int | None = None  # the outbox row of the question (edited once answered)


def shown_name(path: Path) -> str:
    """A staged file's name as the user sent it (without its unique prefix)."""
    return path.name.split("-", 1)[1] if "-" in path.name else path.name


def shown_names(files: list[Path]) -> str:
    return ", ".join(shown_name(p) for p in files)


def titled(words: str, files: Sequence[Path]) -> str:
    """A task's title: the user's words, then the files' names."""
    names = shown_names(list(files))
    return f"{words.strip()} 📎 {names}" if words.strip() else f"📎 {names}"


def question_key(markup: Any) -> HeldAction | None:
    """The held set a question of the bot's names in its (aiogram) reply markup, if it is one."""
    for row in getattr(markup, "inline_keyboard", None) or []:
        for button in row:
            data = getattr(button, "callback_data", None) or ""
            if data.startswith(f"{HeldAction.__prefix__}:"):
                try:
                    return HeldAction.unpack(data)
                except (TypeError, ValueError):
                    return None
    return None


class HeldFiles:
    """The held sets of files, on disk under ``root``."""

    def __init__(self, root: Path, hold_s: float = HOLD_S) -> None:
        self.root = root
        self.hold_s = hold_s

    def _dir(self, chat_id: int, message_id: int) -> Path:
        return self.root / f"{chat_id}_{message_id}"

    def hold(self, chat_id: int, message_id: int, user_id: int, held: Held) -> Path:
        """Move ``held.files`` (staged) into the held set of this message."""
        target = self._dir(chat_id, message_id)
        target.mkdir(parents=True, exist_ok=True)
        for path in held.files:
            shutil.move(path, target / path.name)
        meta = {
            "user_id": user_id,
            "command": held.command,
            "text": held.text,
            "task_id": held.task_id,
            "locale": held.locale,
            "names": [p.name for p in held.files],
        }
        (target / META).write_text(json.dumps(meta))
        return target

    async def take(self, chat_id: int, message_id: int, user_id: int) -> Held | None:
        """The held set of this message if it is this user's (its files stay until
        ``forget``); None: none, dropped, unreadable, or somebody else's."""
        target = self._dir(chat_id, message_id)
        meta = await _meta(target)
        if meta is None or meta.get("user_id") != user_id:
            return None
        names = [n for n in meta["names"] if isinstance(n, str) and _one_name(n)]
        files = [target / n for n in names if (target / n).exists()]
        return Held(
            files,
            meta["command"],
            meta["text"],
            meta["task_id"],
            meta["locale"],
            meta.get("question_row"),
        )

    async def asked(self, chat_id: int, message_id: int, row_id: int) -> None:
        """Remember the question's outbox row, so the answer can edit it."""
        target = self._dir(chat_id, message_id)
        meta = await _meta(target)
        if meta is not None:
            (target / META).write_text(json.dumps({**meta, "question_row": row_id}))

    def forget(self, chat_id: int, message_id: int) -> bool:
        """Drop the held set (its files that were not moved into a task go with it)."""
        target = self._dir(chat_id, message_id)
        existed = target.exists()
        shutil.rmtree(target, ignore_errors=True)
        return existed

    def prune(self, now: float | None = None, limit: int = 100) -> int:
        """Drop at most ``limit`` held sets older than ``hold_s``; how many were dropped."""
        if not self.root.is_dir():
            return 0
        cutoff = (time.time() if now is None else now) - self.hold_s
        dropped = 0
        for target in self.root.iterdir():
            if dropped >= limit:
                break
            try:
                old = target.stat().st_mtime < cutoff
            except OSError:
                continue
            if old:
                shutil.rmtree(target, ignore_errors=True)
                dropped += 1
        return dropped

    @staticmethod
    def keyboard(caption: str, message_id: int, task_id: int | None) -> Keyboard:
        action = HeldAction(action=HeldButton.DROP, message_id=message_id, task_id=task_id or 0)
        return Keyboard.of([[action.button(caption)]])


async def _meta(target: Path) -> dict[str, Any] | None:
    """The held set's ``held.json``: a small regular file read in a thread (never through a
    link, never waited on); None when it is missing or not one."""
    try:
        meta = json.loads(await read_capped_soon(target / META, META_BYTES))
    except (FileRefused, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _one_name(name: str) -> bool:
    """A held file's name stays inside its set: one path component, no dot-files."""
    return Path(name).name == name and not name.startswith(".")
