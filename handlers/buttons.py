"""Task buttons: Cancel on acknowledgements, Resume / Mark failed after a restart."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from aiogram import F, Router
from aiogram.types import CallbackQuery

from bot.tasks.card import TaskCard
from bot.tasks.service import TaskService
from bot.telegram.callbacks import ACTIONS, TaskAction
from bot.telegram.texts import Texts
from bot.worktrees.card import WorktreeCard


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
        actions: dict[str, Callable[[int, int], Awaitable[object]]] = {
            "resume": tasks.resume_interrupted, "fail": tasks.mark_failed,
            "followup": card.ask_follow_up, "transcript": card.send_transcript,
            "retry": card.retry, "diff": worktree_card.show_diff, "merge": worktree_card.merge,
            "discard": partial(worktree_card.discard, confirmed=False),
            "discard_yes": partial(worktree_card.discard, confirmed=True),
            "archive": lambda user, task_id: tasks.archive(user, str(task_id))}
        await actions[callback_data.action](user_id, callback_data.task_id)
        await query.answer(texts.get(locale, "callback.done"))

    @r.callback_query()
    async def on_stale(query: CallbackQuery, texts: Texts, locale: str) -> None:
        await query.answer(texts.get(locale, "callback.stale"))

    return r


def _plain(html_text: str) -> str:
    return html_text.replace("<b>", "").replace("</b>", "")
