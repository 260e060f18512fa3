"""The drop folder ``<data dir>/inbox/``: a task file written there (atomically: a temporary
name, then a rename to ``*.md``) becomes a task, like ``detach add``; it moves to
``inbox/accepted/``, or, held by its preflight until its owner answers in Telegram, to
``inbox/held/`` beside a ``.reason.txt`` (``bot.mcp.handoff`` reads it). A malformed file moves
to ``inbox/rejected/`` beside a ``.reason.txt``, and its owner is told. When a task that came as
a file finishes, its completed task file (with ``# Result`` and the trailing block) is written
to ``inbox/done/``. ``bot.tasks.export`` renders any task in the same format."""

from __future__ import annotations

import logging
import os
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path

from bot.errors import FileRefused, Unreadable, UserInputError
from bot.models import TaskKind
from bot.rows import PreflightHold, TaskFileRow
from bot.tasks.filing import TaskFiling
from bot.tasks.requests import TaskRequests
from bot.tasks.taskfile import SHELL_CLIENT, TaskFile, TaskFileError, parse, write_atomic
from bot.telegram.outbox import Outbox
from bot.telegram.render import plain
from bot.telegram.texts import DEFAULT_LOCALE, Texts
from executors.reading import read_capped_soon

log = logging.getLogger(__name__)
MAX_FILE_BYTES = 256 * 1024


class Inbox:
    def __init__(
        self,
        *,
        directory: Path,
        service: TaskRequests,
        filing: TaskFiling,
        outbox: Outbox,
        texts: Texts,
        allowed_users: Collection[int],
    ) -> None:
        self.directory = directory
        self._service = service
        self._filing = filing
        self._outbox = outbox
        self._texts = texts
        self._allowed = allowed_users
        for sub in ("", "accepted", "rejected", "done", "held"):
            (directory / sub).mkdir(parents=True, exist_ok=True)

    async def poll_once(self) -> None:
        """Each ``*.md`` (whatever it is: a link, a FIFO or a directory is refused, not
        skipped), then the finished tasks' files."""
        for path in sorted(self.directory.glob("*.md")):
            if not path.name.startswith("."):
                await self._take(path)
        await self._write_back()

    async def _take(self, path: Path) -> None:
        chat_id: int | None = None
        try:
            tf = parse(await _read(path))
            chat_id = tf.chat_id
            started = await self._start(path.name, tf)
        except TaskFileError as exc:
            await self._reject(path, str(exc), chat_id)
            return
        except FileRefused as exc:
            if exc.why is not Unreadable.MISSING:  # gone meanwhile (withdrawn): nothing to do
                await self._reject(path, self._said(exc), chat_id)
            return
        except UserInputError as exc:
            await self._reject(path, self._said(exc), chat_id)
            return
        if isinstance(started, PreflightHold):
            self._held(path, started)
        else:
            _move(path, self.directory / "accepted" / f"{started}-{path.name}")

    def _held(self, path: Path, hold: PreflightHold) -> None:
        """The file waits in ``held/`` as ``h<hold>-<name>``, its reason beside it."""
        target = _free(self.directory / "held" / f"h{hold.id}-{path.name}")
        _move(path, target)
        write_atomic(target.with_name(target.name + ".reason.txt"), held_reason(hold) + "\n")
        log.info("inbox file %s held by its preflight (hold %s)", path.name, hold.id)

    def _said(self, exc: UserInputError | FileRefused) -> str:
        return plain(self._texts.get(DEFAULT_LOCALE, exc.key, **exc.params))

    async def _start(self, name: str, tf: TaskFile) -> int | PreflightHold:
        owner = self._owner(tf.chat_id)
        chat_id = tf.chat_id or owner
        locale = (await self._filing.locales()).get(owner, DEFAULT_LOCALE)
        options = tf.options()
        lineage = await self._filing.lineage(tf.parent, owner) if tf.parent is not None else None
        new = await self._service.plan(
            owner,
            chat_id,
            TaskKind.DETACH,
            options,
            tf.prompt,
            locale,
            "detach",
            slug=tf.slug,
            lineage=lineage,
        )
        origin = self._origin(locale, name, tf.client)
        file = TaskFileRow(0, name, tf.goal, tf.constraints)  # its task's id once it starts
        started = await self._service.walk_away(replace(new, origin=origin), options, file)
        if isinstance(started, PreflightHold):
            return started
        log.info("inbox file %s became task %s", name, started.id)
        return started.id

    def _origin(self, locale: str, name: str, client: str | None) -> str:
        """Where the task came from, under its goal: the shell, an MCP client or a file."""
        if client == SHELL_CLIENT:
            return self._texts.get(locale, "inbox.from_shell")
        if client:
            return self._texts.get(locale, "mcp.origin", client=client)
        return self._texts.get(locale, "inbox.origin", name=name)

    def _owner(self, chat_id: int | None) -> int:
        """The chat's user when it is a private chat of an allowed user; a group's tasks
        belong to the first allowed user. Anything else is refused."""
        if not self._allowed:
            raise TaskFileError("DETACH_ALLOWED_USERS is empty: nobody to report to")
        if chat_id is None or chat_id < 0:
            return min(self._allowed)
        if chat_id not in self._allowed:
            raise TaskFileError(f"chat_id {chat_id} is not an allowed user")
        return chat_id

    async def _reject(self, path: Path, reason: str, chat_id: int | None) -> None:
        target = _free(self.directory / "rejected" / path.name)
        _move(path, target)
        write_atomic(target.with_name(target.name + ".reason.txt"), reason + "\n")
        log.warning("inbox file %s rejected: %s", path.name, reason)
        told = [chat_id] if chat_id in self._allowed else sorted(self._allowed)
        locales = await self._filing.locales()
        for user in told:
            assert user is not None
            await self._outbox.send(
                user,
                self._texts.get(
                    locales.get(user, DEFAULT_LOCALE),
                    "inbox.rejected",
                    name=path.name,
                    reason=reason,
                    where=str(target),
                ),
            )

    async def _write_back(self) -> None:
        for task, text in await self._filing.finished():
            write_atomic(self.directory / "done" / f"{task.id}-{task.slug}.md", text)
            await self._filing.written(task)


async def _read(path: Path) -> str:
    """The task file's text: a regular file of at most MAX_FILE_BYTES, never through a link
    nor waited on, read in a thread (``FileRefused`` otherwise)."""
    data = await read_capped_soon(path, MAX_FILE_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise TaskFileError("not UTF-8 text") from None


def held_reason(hold: PreflightHold) -> str:
    """Why a task file waits in ``held/``: one line for whoever dropped it."""
    if hold.deadline is not None:  # a question: it waits for an answer, then starts
        then = "with no answer in time it starts on its best judgement"
    else:
        then = "Start anyway or Drop, also in /pending; nothing runs until then"
    said = hold.question or hold.reason
    return (
        f"held by the bot's preflight (hold H{hold.id}): {said} The owner decides in "
        f"Telegram: {then}."
    )


def _free(path: Path) -> Path:
    n, candidate = 1, path
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}.{n}{path.suffix}")
        n += 1
    return candidate


def _move(source: Path, target: Path) -> None:
    os.replace(source, _free(target))
