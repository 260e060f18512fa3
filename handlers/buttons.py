"""Task buttons: Cancel on acknowledgements, Resume / Mark failed after a restart."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.types import CallbackQuery

from bot.callbacks import ACTIONS, TaskAction
from bot.card import TaskCard
from bot.service import TaskService
from bot.texts import Texts
from bot.worktree_card import WorktreeCard


def router() -> Router:
    r = Router(name="buttons")

    @r.callback_query(TaskAction.filter(F.action.in_(ACTIONS)))
    async def on_task_action(query: CallbackQuery, callback_data: TaskAction,
                             tasks: TaskService, card: TaskCard, worktree_card: WorktreeCard,
                             texts: Texts, locale: str) -> None:
        user_id = query.from_user.id
        if callback_data.action == "cancel":
            task = await tasks.cancel(user_id, callback_data.task_id)
            await query.answer(_plain(texts.get(locale, "task.cancel_requested", label=task.label)))
            return
        task_id = callback_data.task_id
        if callback_data.action == "resume":
            await tasks.resume_interrupted(user_id, task_id)
        elif callback_data.action == "fail":
            await tasks.mark_failed(user_id, task_id)
        elif callback_data.action == "followup":
            await card.ask_follow_up(user_id, task_id)
        elif callback_data.action == "transcript":
            await card.send_transcript(user_id, task_id)
        elif callback_data.action == "retry":
            await card.retry(user_id, task_id)
        elif callback_data.action == "diff":
            await worktree_card.show_diff(user_id, task_id)
        elif callback_data.action == "merge":
            await worktree_card.merge(user_id, task_id)
        elif callback_data.action in ("discard", "discard_yes"):
            await worktree_card.discard(user_id, task_id, callback_data.action == "discard_yes")
        else:
            await tasks.archive(user_id, str(task_id))
        await query.answer(texts.get(locale, "callback.done"))

    @r.callback_query()
    async def on_stale(query: CallbackQuery, texts: Texts, locale: str) -> None:
        await query.answer(texts.get(locale, "callback.stale"))

    return r


def _plain(html_text: str) -> str:
    return html_text.replace("<b>", "").replace("</b>", "")
