"""Task buttons: Cancel on acknowledgements, Resume / Mark failed after a restart."""

from __future__ import annotations

from aiogram import F, Router
from aiogram.types import CallbackQuery

from bot.callbacks import ACTIONS, TaskAction
from bot.models import Task
from bot.notifier import Notifier
from bot.service import TaskService
from bot.texts import Texts


def router() -> Router:
    r = Router(name="buttons")

    @r.callback_query(TaskAction.filter(F.action.in_(ACTIONS)))
    async def on_task_action(query: CallbackQuery, callback_data: TaskAction,
                             tasks: TaskService, notifier: Notifier, texts: Texts,
                             locale: str) -> None:
        user_id = query.from_user.id
        if callback_data.action == "cancel":
            task = await tasks.cancel(user_id, callback_data.task_id)
            await query.answer(_plain(texts.get(locale, "task.cancel_requested", label=task.label)))
            return
        if callback_data.action == "resume":
            task = await tasks.resume_interrupted(user_id, callback_data.task_id)
            await _confirm(query, notifier, texts, task, "task.resumed")
            return
        task = await tasks.mark_failed(user_id, callback_data.task_id)
        await _confirm(query, notifier, texts, task, "task.marked_failed")

    @r.callback_query()
    async def on_stale(query: CallbackQuery, texts: Texts, locale: str) -> None:
        await query.answer(texts.get(locale, "callback.stale"))

    return r


async def _confirm(query: CallbackQuery, notifier: Notifier, texts: Texts, task: Task,
                   key: str) -> None:
    await query.answer(texts.get(task.locale, "callback.done"))
    await notifier.send(task, texts.get(task.locale, key, label=task.label), kind="status")


def _plain(html_text: str) -> str:
    return html_text.replace("<b>", "").replace("</b>", "")
