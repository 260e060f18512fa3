"""The answer to files sent without words (``bot.telegram.held``): a reply with words starts the
task with the held files and any the reply carries, as the chat's command would (its preflight
may hold it), or continues the task the files were a reply to; the held set is then forgotten."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bot.models import Task, TaskKind
from bot.tasks.followup import FollowUp, FollowUps
from bot.tasks.lookup import TaskLookup
from bot.tasks.requests import ChatRequest, TaskRequests
from bot.telegram.held import Held, HeldFiles

PLAIN = ""  # the command of a plain message (all of it is the goal)


@dataclass(frozen=True, slots=True)
class HeldAnswered:
    """The held set answered, its files (``files``), and the task that took them (None: its
    preflight holds it)."""

    held: Held
    files: list[Path]
    task: Task | None


class HeldAnswers:
    def __init__(
        self,
        *,
        held_files: HeldFiles,
        create: TaskRequests,
        follow_up: FollowUps,
        lookup: TaskLookup,
    ) -> None:
        self._held_files = held_files
        self._create = create
        self._follow_up = follow_up
        self._lookup = lookup

    async def start(
        self,
        user_id: int,
        chat_id: int,
        file_message_id: int,
        words: str,
        reply_to: int,
        more: Sequence[Path] = (),
    ) -> HeldAnswered | None:
        """The user's held set of ``file_message_id`` started (or continued) with ``words``
        and ``more`` files, by the message ``reply_to``; None: it is gone (dropped, expired,
        or not the user's)."""
        held = await self._held_files.take(chat_id, file_message_id, user_id)
        if held is None:
            return None
        files = [*held.files, *more]
        task: Task | None
        if held.task_id:
            asked = FollowUp(
                user_id=user_id,
                task_id=held.task_id,
                prompt=words,
                reply_to=reply_to,
                attachments=files,
            )
            await self._follow_up.follow_up(asked)
            task = await self._lookup.get_own(user_id, held.task_id)
        else:
            task = await self._create.from_chat(
                _request(user_id, chat_id, held, words, reply_to, files)
            )
        self._held_files.forget(chat_id, file_message_id)
        return HeldAnswered(held, files, task)


def _request(
    user_id: int, chat_id: int, held: Held, words: str, reply_to: int, files: list[Path]
) -> ChatRequest:
    """The command the files came with (``/detach``, ``/<engine>``, or a plain message), its
    options as typed, then the reply's words."""
    command = held.command or "detach"
    return ChatRequest(
        user_id,
        chat_id,
        TaskKind.DETACH if command == "detach" else TaskKind.SESSION,
        f"{held.text} {words}".strip(),
        held.locale,
        command,
        engine=None if command == "detach" else command,
        reply_to=reply_to,
        with_options=held.command != PLAIN,
        attachments=files,
    )
