"""Approval and question buttons, and /grants with Revoke buttons."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.filters import Command
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message

from bot.approvals.answers import ApprovalAnswers
from bot.approvals.view import APPROVAL_CHOICES, ApprovalAction, GrantAction, QuestionAction
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts


def router() -> Router:
    r = Router(name="approvals")

    @r.callback_query(ApprovalAction.filter(F.choice.in_(APPROVAL_CHOICES)))
    async def on_approval_pressed(query: CallbackQuery, callback_data: ApprovalAction,
                                  answers: ApprovalAnswers, texts: Texts, locale: str) -> None:
        key = await answers.on_approval(query.from_user.id, callback_data.qid,
                                        callback_data.choice, _where(query))
        await query.answer(texts.get(locale, key))

    @r.callback_query(QuestionAction.filter())
    async def on_option_pressed(query: CallbackQuery, callback_data: QuestionAction,
                                answers: ApprovalAnswers, texts: Texts, locale: str) -> None:
        key = await answers.on_option(query.from_user.id, callback_data.qid,
                                      callback_data.option, _where(query))
        await query.answer(texts.get(locale, key))

    @r.message(Command("grants"))
    async def on_grants(message: Message, answers: ApprovalAnswers, texts: Texts,
                        locale: str, outbox: Outbox) -> None:
        text, markup = await _grants_view(answers, texts, locale, message.from_user.id)  # type: ignore[union-attr]
        await outbox.send(message.chat.id, text, markup=markup)

    @r.callback_query(GrantAction.filter())
    async def on_revoke_pressed(query: CallbackQuery, callback_data: GrantAction,
                                answers: ApprovalAnswers, texts: Texts, locale: str,
                                outbox: Outbox) -> None:
        grant = await answers.revoke(query.from_user.id, callback_data.grant_id)
        await query.answer(texts.get(locale, "grants.revoked", pattern=grant.pattern)
                           .replace("<code>", "").replace("</code>", ""))
        text, markup = await _grants_view(answers, texts, locale, query.from_user.id)
        if query.message is not None:
            await outbox.edit(query.message.chat.id, query.message.message_id, text, markup)

    return r


async def _grants_view(answers: ApprovalAnswers, texts: Texts, locale: str,
                       user_id: int) -> tuple[str, InlineKeyboardMarkup | None]:
    grants = await answers.grants(user_id)
    if not grants:
        return texts.get(locale, "grants.empty"), None
    lines = [texts.get(locale, "grants.header")] + [
        texts.get(locale, "grants.line", n=n, pattern=g.pattern, engine=g.engine, cwd=g.cwd)
        for n, g in enumerate(grants, start=1)]
    rows = [[InlineKeyboardButton(text=texts.get(locale, "grants.revoke", n=n),
                                  callback_data=GrantAction(grant_id=g.id).pack())]
            for n, g in enumerate(grants[:20], start=1)]
    return "\n".join(lines), InlineKeyboardMarkup(inline_keyboard=rows)


def _where(query: CallbackQuery) -> tuple[int, int] | None:
    message = query.message
    return (message.chat.id, message.message_id) if message is not None else None
