"""/model (fuzzy preset choice per chat), /spend, and the budget question's buttons."""

from __future__ import annotations

from aiogram import Router
from aiogram.filters import Command, CommandObject
from aiogram.filters.callback_data import CallbackData
from aiogram.types import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message

from bot.approvals.view import BudgetAction
from bot.money.desk import MoneyDesk
from bot.money.presets import Preset
from bot.tasks.card import TaskCard
from bot.tasks.service import TaskService
from bot.telegram.outbox import Outbox
from bot.telegram.render import money
from bot.telegram.texts import Texts


class ModelAction(CallbackData, prefix="md"):
    name: str


def _keyboard(presets: list[Preset]) -> InlineKeyboardMarkup:
    rows = [[InlineKeyboardButton(text=f"{p.name} ({p.engine})",
                                  callback_data=ModelAction(name=p.name).pack())]
            for p in presets if len(ModelAction(name=p.name).pack().encode()) <= 64]
    return InlineKeyboardMarkup(inline_keyboard=rows)


def router() -> Router:
    r = Router(name="money")

    @r.message(Command("model"))
    async def on_model(message: Message, command: CommandObject, tasks: TaskService,
                       texts: Texts, locale: str, outbox: Outbox) -> None:
        desk: MoneyDesk = tasks.money
        typed = (command.args or "").strip()
        if not typed:
            current = await desk.chat_preset(message.chat.id)
            text = (texts.get(locale, "money.model_current", name=current.name,
                              engine=current.engine, model=current.model) if current
                    else texts.get(locale, "money.model_none"))
            presets = [desk.catalog.get(n) for n in desk.catalog.names()]
            await outbox.send(message.chat.id, text, markup=_keyboard([p for p in presets if p]))
            return
        candidates = desk.candidates(typed)
        if candidates:
            await outbox.send(message.chat.id, texts.get(locale, "money.model_pick"),
                                 markup=_keyboard(candidates))
            return
        preset = await desk.set_chat_preset(message.chat.id, typed)
        await outbox.send(message.chat.id, texts.get(locale, "money.model_set", name=preset.name,
                                       engine=preset.engine, model=preset.model))

    @r.callback_query(ModelAction.filter())
    async def on_model_pressed(query: CallbackQuery, callback_data: ModelAction,
                               tasks: TaskService, texts: Texts, locale: str,
                               outbox: Outbox) -> None:
        chat_id = query.message.chat.id if query.message else query.from_user.id
        preset = await tasks.money.set_chat_preset(chat_id, callback_data.name)
        text = texts.get(locale, "money.model_set", name=preset.name,
                         engine=preset.engine, model=preset.model)
        await query.answer()
        if query.message is not None:
            await outbox.edit(chat_id, query.message.message_id, text)

    @r.message(Command("spend"))
    async def on_spend(message: Message, tasks: TaskService, texts: Texts, locale: str,
                       outbox: Outbox) -> None:
        summary = await tasks.money.summary(message.from_user.id)  # type: ignore[union-attr]
        cap = (texts.get(locale, "money.spend_cap", cap=money(summary.cap_usd))
               if summary.cap_usd is not None else "")
        lines = [texts.raw(locale, "money.spend_header", today=money(summary.today_usd),
                           cap=cap)]
        lines += [texts.get(locale, "money.spend_day", day=day, total=money(total))
                  for day, total in summary.days if total]
        if summary.top:
            lines.append(texts.get(locale, "money.spend_top"))
            lines += [texts.get(locale, "money.spend_task", label=t.label,
                                total=money(t.total_cost_usd)) for t in summary.top]
        else:
            lines.append(texts.get(locale, "money.spend_none"))
        await outbox.send(message.chat.id, "\n".join(lines))

    @r.callback_query(BudgetAction.filter())
    async def on_budget_pressed(query: CallbackQuery, callback_data: BudgetAction,
                                card: TaskCard, texts: Texts, locale: str) -> None:
        await card.answer_budget(query.from_user.id, callback_data.qid, callback_data.extend)
        await query.answer(texts.get(locale, "callback.done"))

    return r
