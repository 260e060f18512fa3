"""Task commands: /detach and one per engine, /cd, /tasks, /result, /export, /cancel,
/archive."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from aiogram import Bot, Router
from aiogram.filters import Command, CommandObject, Filter
from aiogram.types import Message

from bot.models import TaskKind
from bot.tasks.card import TaskCard
from bot.tasks.chat import ChatSettings
from bot.tasks.lifecycle import TaskLifecycle
from bot.tasks.lookup import TaskLookup, parse_task_id
from bot.tasks.options import split_options
from bot.tasks.requests import ChatRequest
from bot.tasks.usecases import UseCases
from bot.tasks.waiting import Waiting
from bot.telegram.attachments import staged
from bot.telegram.held import Held
from bot.telegram.render import age
from bot.telegram.reply import Reply
from handlers.held import held_back

router = Router(name="tasks")


class TaskCommand(Filter):
    """/detach, or /<engine> for an engine of ``engine_commands`` (workflow data: the engines
    this bot was built with): aiogram's ``Command`` over those, handing on ``command``."""

    async def __call__(
        self, message: Message, bot: Bot, engine_commands: Sequence[str]
    ) -> bool | dict[str, Any]:
        return await Command("detach", *engine_commands)(message, bot)


@router.message(TaskCommand())
async def on_task_command(
    message: Message,
    command: CommandObject,
    uses: UseCases,
    user_id: int,
    locale: str,
    reply: Reply,
) -> None:
    """/detach runs a self-contained goal on the default engine; /<engine> starts a
    session on that engine. A file with the command and no words is held, and asked about."""
    name = command.command.lower()
    kind = TaskKind.DETACH if name == "detach" else TaskKind.SESSION
    engine = None if name == "detach" else name
    async with staged(message, uses.create) as files:
        words = split_options(command.args or "")[1]
        asked = Held(files, name, command.args or "", None, locale)
        if await held_back(message, files, words, uses.held_files, reply, asked):
            return
        await uses.create.from_chat(
            ChatRequest(
                user_id,
                message.chat.id,
                kind,
                command.args or "",
                locale,
                name,
                engine=engine,
                reply_to=message.message_id,
                attachments=files,
            )
        )


@router.message(Command("cd"))
async def on_cd(message: Message, command: CommandObject, chat: ChatSettings, reply: Reply) -> None:
    if not (command.args or "").strip():
        await reply("workdir.current", cwd=await chat.shown_dir(message.chat.id))
        return
    cwd = await chat.change_dir(message.chat.id, command.args or "")
    await reply("workdir.set", cwd=cwd)


@router.message(Command("tasks"))
async def on_tasks(
    message: Message, lookup: TaskLookup, waiting: Waiting, user_id: int, reply: Reply
) -> None:
    """The tasks held by their preflight, then the open tasks, those that wait first, each
    named by what it waits for (as on every surface) or its status."""
    waits = await waiting.of(user_id, await lookup.list(user_id), reply.locale)
    if not waits.tasks and not waits.held:
        await _nothing_open(lookup, user_id, reply)
        return
    now = datetime.now(UTC)
    lines = [reply.text("tasks.header"), *waits.held]
    for row in waits.tasks:
        line = reply.text(
            "tasks.line",
            icon=row.icon,
            label=row.task.label,
            status=row.state,
            age=age(row.task.updated_at, now),
        )
        lines.append(
            f"{line} · {reply.text('tasks.resets', at=row.resets)}" if row.resets else line
        )
    await reply.send("\n".join(lines))


@router.message(Command("limits"))
async def on_limits(
    message: Message,
    waiting: Waiting,
    user_id: int,
    reply: Reply,
    engine_commands: Sequence[str],
) -> None:
    await reply.send(await waiting.limits(user_id, reply.locale, engine_commands))


async def _task_ref(
    message: Message, command: CommandObject, lookup: TaskLookup, user_id: int
) -> str:
    """The task a command names: its argument, or, with none, in a forum topic, the topic's
    task (the user's newest there); "" when neither."""
    typed = (command.args or "").strip()
    if typed or not message.is_topic_message or message.message_thread_id is None:
        return typed
    task = await lookup.task_in_topic(message.chat.id, message.message_thread_id, user_id)
    return str(task.id) if task is not None else ""


@router.message(Command("result"))
async def on_result(
    message: Message, command: CommandObject, lookup: TaskLookup, card: TaskCard, user_id: int
) -> None:
    ref = await _task_ref(message, command, lookup, user_id)
    await card.show_result(user_id, parse_task_id(ref, "result"))


@router.message(Command("export"))
async def on_export(
    message: Message, command: CommandObject, card: TaskCard, lookup: TaskLookup, user_id: int
) -> None:
    words = (command.args or "").split()
    if words and words[-1].lower() == "jsonl":  # `/export 12 jsonl`: the transcript's events
        typed = replace(command, args=" ".join(words[:-1]))
        ref = await _task_ref(message, typed, lookup, user_id)
        await card.send_jsonl(user_id, parse_task_id(ref, "export"))
        return
    ref = await _task_ref(message, command, lookup, user_id)
    await card.send_task_file(user_id, parse_task_id(ref, "export"))


@router.message(Command("cancel"))
async def on_cancel(
    message: Message,
    command: CommandObject,
    lookup: TaskLookup,
    lifecycle: TaskLifecycle,
    user_id: int,
) -> None:
    # answered in the task's chat by the use case: one message, edited to the end
    ref = await _task_ref(message, command, lookup, user_id)
    await lifecycle.cancel(user_id, parse_task_id(ref, "cancel"), reply_to=message.message_id)


@router.message(Command("archive"))
async def on_archive(
    message: Message,
    command: CommandObject,
    lookup: TaskLookup,
    lifecycle: TaskLifecycle,
    user_id: int,
    reply: Reply,
) -> None:
    async def say(count: int) -> int:  # with the archive, before its cards' edits
        return await reply.send(reply.texts.plural(reply.locale, "task.archived_count", count))

    ref = await _task_ref(message, command, lookup, user_id) or "?"
    await lifecycle.archive(user_id, ref, announce=say)


async def _nothing_open(lookup: TaskLookup, user_id: int, reply: Reply) -> None:
    """No open task: how many are archived, else how to start one."""
    archived = await lookup.archived_count(user_id)
    if archived:
        await reply("tasks.none_open", archived=archived)
    else:
        await reply("tasks.empty")
