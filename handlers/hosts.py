"""``/hosts``: the machines that run tasks on a shared database (bot.fleet.hosts), each with
whether it is online, its engines, its slots in use and its projects; ``/host``: the chat's
default host for new tasks."""

from __future__ import annotations

from aiogram import Router
from aiogram.filters import Command, CommandObject
from aiogram.types import Message

from bot.fleet.status import FleetStatus, hosts_text
from bot.tasks.chat import ChatSettings
from bot.telegram.reply import Reply

__all__ = ["hosts_text", "router"]
router = Router(name="hosts")


@router.message(Command("hosts"))
async def on_hosts(message: Message, fleet: FleetStatus, reply: Reply) -> None:
    if not fleet.shared:
        await reply("hosts.one_process")
        return
    await reply.send(hosts_text(reply.texts, reply.locale, await fleet.hosts()))


@router.message(Command("host"))
async def on_host(
    message: Message, command: CommandObject, chat: ChatSettings, reply: Reply
) -> None:
    """/host <name>|any: the host this chat's new tasks run on; bare: the current choice."""
    typed = (command.args or "").strip()
    host = (
        await chat.set_host(message.chat.id, typed) if typed else await chat.host(message.chat.id)
    )
    if host:
        await reply("host.pinned", host=host)
    else:
        await reply("host.any")
