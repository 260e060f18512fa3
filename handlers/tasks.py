"""Task commands: /detach, /claude, /tasks, /result, /cancel, /archive."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from aiogram import Router
from aiogram.filters import Command, CommandObject
from aiogram.types import Message

from bot.models import TaskKind
from bot.tasks.card import TaskCard
from bot.tasks.service import TaskService, parse_task_id
from bot.telegram.outbox import Outbox
from bot.telegram.render import STATUS_ICONS, age
from bot.telegram.texts import Texts


def router(engines: Sequence[str]) -> Router:
    """``engines``: one session command per engine (/claude, /codex, ...)."""
    r = Router(name="tasks")

    @r.message(Command("detach", *engines))
    async def on_task_command(message: Message, command: CommandObject, tasks: TaskService,
                              locale: str) -> None:
        """/detach runs a self-contained goal on the default engine; /<engine> starts a
        session on that engine."""
        name = command.command.lower()
        kind = TaskKind.DETACH if name == "detach" else TaskKind.SESSION
        engine = None if name == "detach" else name
        await tasks.start_from_chat(message.from_user.id, message.chat.id,  # type: ignore[union-attr]
                                    kind, command.args or "", locale, name, engine=engine,
                                    reply_to=message.message_id)

    @r.message(Command("cd"))
    async def on_cd(message: Message, command: CommandObject, tasks: TaskService, texts: Texts,
                    locale: str, outbox: Outbox) -> None:
        if not (command.args or "").strip():
            cwd = await tasks.current_dir(message.chat.id)
            await outbox.send(message.chat.id, texts.get(locale, "workdir.current", cwd=str(cwd)))
            return
        cwd = await tasks.change_dir(message.chat.id, command.args or "")
        await outbox.send(message.chat.id, texts.get(locale, "workdir.set", cwd=str(cwd)))

    @r.message(Command("tasks"))
    async def on_tasks(message: Message, tasks: TaskService, texts: Texts, locale: str,
                       outbox: Outbox) -> None:
        found = await tasks.list(message.from_user.id)  # type: ignore[union-attr]
        if not found:
            await outbox.send(message.chat.id, texts.get(locale, "tasks.empty"))
            return
        now = datetime.now(UTC)
        lines = [texts.get(locale, "tasks.header")] + [texts.get(
            locale, "tasks.line", icon=STATUS_ICONS[t.status], label=t.label,
            status=texts.status(locale, t.status), age=age(t.updated_at, now))
            for t in found]
        await outbox.send(message.chat.id, "\n".join(lines))

    @r.message(Command("result"))
    async def on_result(message: Message, command: CommandObject, tasks: TaskService) -> None:
        await tasks.show_result(message.from_user.id,  # type: ignore[union-attr]
                                parse_task_id(command.args or "", "result"))

    @r.message(Command("export"))
    async def on_export(message: Message, command: CommandObject, card: TaskCard) -> None:
        await card.send_task_file(message.from_user.id,  # type: ignore[union-attr]
                                  parse_task_id(command.args or "", "export"))

    @r.message(Command("cancel"))
    async def on_cancel(message: Message, command: CommandObject, tasks: TaskService,
                        texts: Texts, locale: str, outbox: Outbox) -> None:
        task = await tasks.cancel(message.from_user.id,  # type: ignore[union-attr]
                                  parse_task_id(command.args or "", "cancel"))
        await outbox.send(message.chat.id,
                          texts.get(locale, "task.cancel_requested", label=task.label))

    @r.message(Command("archive"))
    async def on_archive(message: Message, command: CommandObject, tasks: TaskService,
                         texts: Texts, locale: str, outbox: Outbox) -> None:
        ref = (command.args or "").strip()
        count = await tasks.archive(message.from_user.id,  # type: ignore[union-attr]
                                    ref or "?")
        await outbox.send(message.chat.id, texts.get(locale, "task.archived", count=count))

    return r
