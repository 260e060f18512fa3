"""Approval and question buttons, and /grants with Revoke buttons."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.filters import Command
from aiogram.types import CallbackQuery, Message

from bot.approvals.answers import ApprovalAnswers
from bot.approvals.stalls import StallAction, StallChoice
from bot.approvals.view import (
    APPROVAL_CHOICES,
    CHECK_GRANTS,
    ApprovalAction,
    GrantAction,
    QuestionAction,
    grant_rule,
)
from bot.tasks.lifecycle import TaskLifecycle
from bot.tasks.pending import PendingAsks
from bot.telegram.markup import Button, Keyboard
from bot.telegram.render import plain
from bot.telegram.reply import Reply
from handlers.taps import Tapped

router = Router(name="approvals")


@router.callback_query(Tapped(ApprovalAction, F.choice.in_(APPROVAL_CHOICES)))
async def on_approval_pressed(
    query: CallbackQuery,
    callback_data: ApprovalAction,
    answers: ApprovalAnswers,
    user_id: int,
    reply: Reply,
) -> None:
    key = await answers.on_approval(user_id, callback_data.qid, callback_data.choice, _where(query))
    await query.answer(reply.text(key))


@router.callback_query(Tapped(QuestionAction))
async def on_option_pressed(
    query: CallbackQuery,
    callback_data: QuestionAction,
    answers: ApprovalAnswers,
    user_id: int,
    reply: Reply,
) -> None:
    key = await answers.on_option(user_id, callback_data.qid, callback_data.option, _where(query))
    await query.answer(reply.text(key))


@router.message(Command("pending"))
async def on_pending(message: Message, pending: PendingAsks, user_id: int, reply: Reply) -> None:
    """Every open approval, question, budget decision and preflight hold, each with its own
    buttons: a tap here answers it as the original would (first answer wins; both messages
    are edited). Shown again, an older copy in this chat gives way to the new one."""
    found = await pending.of(user_id)
    if not found:
        await reply("pending.empty")
        return
    for ask in found:
        await pending.copied(ask, reply.chat_id, await reply.send(ask.text, markup=ask.markup))


@router.callback_query(Tapped(StallAction))
async def on_stall_pressed(
    query: CallbackQuery,
    callback_data: StallAction,
    answers: ApprovalAnswers,
    lifecycle: TaskLifecycle,
    user_id: int,
    reply: Reply,
) -> None:
    """A stall watchdog's Stop (cancels the task's turn, as /cancel) or Keep waiting."""
    if callback_data.choice is StallChoice.WAIT:
        await query.answer(reply.text(await answers.keep_waiting(user_id, callback_data.turn_id)))
        return
    task = await lifecycle.cancel(
        user_id, await answers.stalled_task(user_id, callback_data.turn_id)
    )
    await query.answer(plain(reply.text("task.cancel_requested", label=task.label)))


@router.message(Command("grants"))
async def on_grants(message: Message, answers: ApprovalAnswers, user_id: int, reply: Reply) -> None:
    text, markup = await _grants_view(answers, reply, user_id)
    await reply.send(text, markup=markup)


@router.callback_query(Tapped(GrantAction))
async def on_revoke_pressed(
    query: CallbackQuery,
    callback_data: GrantAction,
    answers: ApprovalAnswers,
    user_id: int,
    reply: Reply,
) -> None:
    grant = await answers.revoke(user_id, callback_data.grant_id)
    await query.answer(plain(reply.text("grants.revoked", pattern=grant_rule(grant.pattern))))
    text, markup = await _grants_view(answers, reply, user_id)
    if query.message is not None:
        await reply.edit(query.message.message_id, text, markup)


async def _grants_view(
    answers: ApprovalAnswers, reply: Reply, user_id: int
) -> tuple[str, Keyboard | None]:
    grants = await answers.grants(user_id)
    if not grants:
        return reply.text("grants.empty"), None
    lines = [reply.text("grants.header")] + [
        _grant_line(reply, n, g.pattern, g.engine, g.cwd) for n, g in enumerate(grants, start=1)
    ]
    rows = [
        [
            Button(
                text=reply.text("grants.revoke", n=n),
                callback_data=GrantAction(grant_id=g.id).pack(),
            )
        ]
        for n, g in enumerate(grants[:20], start=1)
    ]
    return "\n".join(lines), Keyboard.of(rows)


def _grant_line(reply: Reply, n: int, pattern: str, engine: str, cwd: str) -> str:
    """A tool rule with its engine, or a repository's check: its command and directory."""
    if engine == CHECK_GRANTS:
        return reply.text("grants.check_line", n=n, command=grant_rule(pattern), cwd=cwd)
    return reply.text("grants.line", n=n, pattern=pattern, engine=engine, cwd=cwd)


def _where(query: CallbackQuery) -> tuple[int, int] | None:
    message = query.message
    return (message.chat.id, message.message_id) if message is not None else None
