"""/model (fuzzy preset choice per chat), /spend, and the budget question's buttons."""

from __future__ import annotations

from aiogram import Router
from aiogram.filters import Command, CommandObject
from aiogram.types import CallbackQuery, Message

from bot.approvals.view import BudgetAction
from bot.models import SpendLine
from bot.money.desk import MoneyDesk, SpendSummary
from bot.money.presets import Preset
from bot.tasks.card import TaskCard
from bot.telegram.markup import Button, CallbackData, Keyboard
from bot.telegram.render import money, tokens
from bot.telegram.reply import Reply
from handlers.taps import Tapped

router = Router(name="money")


class ModelAction(CallbackData, prefix="md"):
    name: str


def _keyboard(presets: list[Preset]) -> Keyboard:
    rows = [
        [Button(text=f"{p.name} ({p.engine})", callback_data=ModelAction(name=p.name).pack())]
        for p in presets
        if len(ModelAction(name=p.name).pack().encode()) <= 64
    ]
    return Keyboard.of(rows)


def _engine_lines(summary: SpendSummary, desk: MoneyDesk, reply: Reply) -> list[str]:
    """Tokens and cost per engine over the summary's days, every engine's; an unpriced model's
    cost is what the caps counted, and the last line says at which preset's price."""
    engines: dict[str, list[SpendLine]] = {}
    for line in summary.models:
        engines.setdefault(line.engine, []).append(line)
    if not engines:
        return []
    lines = [reply.text("money.spend_engines", days=len(summary.days))]
    counted_as: list[str] = []
    for engine, models in engines.items():
        priced = [m for m in models if not m.unpriced]
        unpriced = [m for m in models if m.unpriced]
        text = reply.text(
            "money.spend_engine",
            engine=engine,
            input=tokens(sum(m.input_tokens for m in models)),
            output=tokens(sum(m.output_tokens for m in models)),
        )
        if priced:
            text += reply.text(
                "money.spend_engine_cost", total=money(sum(m.cost_usd for m in priced))
            )
        if ran := sorted({m.model for m in priced if m.model}):  # as the engine named them
            text += reply.text("money.spend_engine_models", models=", ".join(ran))
        if unpriced:
            text += reply.text(
                "money.spend_engine_unpriced",
                models=", ".join(sorted({m.model or "?" for m in unpriced})),
                counted=money(sum(m.cost_usd for m in unpriced)),
            )
            dearest = desk.counted_as(engine)
            counted_as.append(f"{engine}: {dearest.name if dearest else '–'}")
        lines.append(text)
    if counted_as:
        lines.append(reply.text("money.spend_unpriced_note", presets="; ".join(counted_as)))
    return lines


@router.message(Command("model"))
async def on_model(
    message: Message, command: CommandObject, money_desk: MoneyDesk, reply: Reply
) -> None:
    desk = money_desk
    typed = (command.args or "").strip()
    if not typed:
        current = await desk.chat_preset(message.chat.id)
        text = (
            reply.text(
                "money.model_current",
                name=current.name,
                engine=current.engine,
                model=current.model,
            )
            if current
            else reply.text("money.model_none")
        )
        presets = [desk.catalog.get(n) for n in desk.catalog.names()]
        await reply.send(text, markup=_keyboard([p for p in presets if p]))
        return
    candidates = desk.candidates(typed)
    if candidates:
        await reply("money.model_pick", markup=_keyboard(candidates))
        return
    preset = await desk.set_chat_preset(message.chat.id, typed)
    await reply("money.model_set", name=preset.name, engine=preset.engine, model=preset.model)


@router.callback_query(Tapped(ModelAction))
async def on_model_pressed(
    query: CallbackQuery, callback_data: ModelAction, money_desk: MoneyDesk, reply: Reply
) -> None:
    preset = await money_desk.set_chat_preset(reply.chat_id, callback_data.name)
    await query.answer()
    if query.message is not None:
        await reply.edit(
            query.message.message_id,
            reply.text(
                "money.model_set", name=preset.name, engine=preset.engine, model=preset.model
            ),
        )


@router.message(Command("spend"))
async def on_spend(message: Message, money_desk: MoneyDesk, user_id: int, reply: Reply) -> None:
    summary = await money_desk.summary(user_id)
    cap = (
        reply.text("money.spend_cap", cap=money(summary.cap_usd))
        if summary.cap_usd is not None
        else ""
    )
    lines = [
        reply.texts.raw(reply.locale, "money.spend_header", today=money(summary.today_usd), cap=cap)
    ]
    lines += [
        reply.text("money.spend_day", day=day, total=money(total))
        for day, total in summary.days
        if total
    ]
    lines += _engine_lines(summary, money_desk, reply)
    if summary.top:
        lines.append(reply.text("money.spend_top"))
        lines += [
            reply.text("money.spend_task", label=t.label, total=money(t.total_cost_usd))
            for t in summary.top
        ]
    else:
        lines.append(reply.text("money.spend_none"))
    await reply.send("\n".join(lines))


@router.callback_query(Tapped(BudgetAction))
async def on_budget_pressed(
    query: CallbackQuery,
    callback_data: BudgetAction,
    card: TaskCard,
    user_id: int,
    reply: Reply,
) -> None:
    await card.answer_budget(user_id, callback_data.qid, callback_data.extend)
    toast = "toast.extended" if callback_data.extend else "toast.stopped"
    await query.answer(reply.text(toast))
