"""/audit: the owner's approvals, grants, consents, budget decisions and cancels, newest first,
a page at a time with ‹ › buttons."""

from __future__ import annotations

from typing import Annotated

from aiogram import Router
from aiogram.filters import Command
from aiogram.types import CallbackQuery, Message
from pydantic import Field

from bot.tasks.audit import MAX_PAGE, AuditLog, AuditPage
from bot.telegram.markup import CallbackData, Keyboard
from bot.telegram.reply import Reply
from handlers.taps import Tapped

router = Router(name="audit")


class AuditPageAction(CallbackData, prefix="au"):
    page: Annotated[int, Field(ge=0, le=MAX_PAGE)]


@router.message(Command("audit"))
async def on_audit(message: Message, audit: AuditLog, user_id: int, reply: Reply) -> None:
    shown = await audit.page(user_id, reply.locale)
    await reply.send(audit.render(reply.locale, shown), markup=_buttons(reply, shown))


@router.callback_query(Tapped(AuditPageAction))
async def on_audit_page(
    query: CallbackQuery,
    callback_data: AuditPageAction,
    audit: AuditLog,
    user_id: int,
    reply: Reply,
) -> None:
    shown = await audit.page(user_id, reply.locale, callback_data.page)
    await query.answer()
    if query.message is not None:
        text = audit.render(reply.locale, shown)
        await reply.edit(query.message.message_id, text, _buttons(reply, shown))


def _buttons(reply: Reply, shown: AuditPage) -> Keyboard | None:
    row = []
    if shown.page > 0:
        row.append(AuditPageAction(page=shown.page - 1).button(reply.text("audit.newer")))
    if shown.has_older:
        row.append(AuditPageAction(page=shown.page + 1).button(reply.text("audit.older")))
    return Keyboard.of([row]) if row else None
