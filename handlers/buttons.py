"""Task buttons: Cancel on acknowledgements, Resume / Mark failed after a restart, the card's
and the worktree card's buttons, Run on <engine> now / Wait on a usage limit's notice, a
preflight's answers and Start anyway, Run on <default> instead; a button that is not (or no
longer) ours is stale."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial

from aiogram import F, Router
from aiogram.types import CallbackQuery

from bot.preflight.message import PreflightAction
from bot.preflight.routed import RunDefault
from bot.tasks.card import TaskCard
from bot.tasks.handover import Handover
from bot.tasks.lifecycle import TaskLifecycle
from bot.tasks.preflighting import PreflightStep
from bot.tasks.worktree import WorktreeCard
from bot.telegram.callbacks import ACTIONS, RUN_ON, TaskAction, TaskButton, run_on_engine
from bot.telegram.render import plain
from bot.telegram.reply import Reply
from handlers.taps import Tapped

router = Router(name="buttons")


@router.callback_query(Tapped(TaskAction, F.action.startswith(RUN_ON)))
async def on_run_on(
    query: CallbackQuery,
    callback_data: TaskAction,
    handover: Handover,
    user_id: int,
    reply: Reply,
) -> None:
    engine = run_on_engine(callback_data.action) or ""
    task = await handover.run_on(user_id, callback_data.task_id, engine)
    await query.answer(
        plain(reply.text("task.engine_switch_done", label=task.label, engine=engine.capitalize()))
    )


@router.callback_query(Tapped(TaskAction, F.action.in_(ACTIONS)))
async def on_task_action(
    query: CallbackQuery,
    callback_data: TaskAction,
    lifecycle: TaskLifecycle,
    card: TaskCard,
    worktree_card: WorktreeCard,
    handover: Handover,
    user_id: int,
    reply: Reply,
) -> None:
    if callback_data.action == TaskButton.WAIT:
        task = await handover.keep_waiting(user_id, callback_data.task_id)
        await query.answer(plain(reply.text("task.wait_chosen", label=task.label)))
        return
    if callback_data.action == TaskButton.CANCEL:
        task = await lifecycle.cancel(user_id, callback_data.task_id)
        await query.answer(plain(reply.text("task.cancel_requested", label=task.label)))
        return
    actions: dict[TaskButton, Callable[[int, int], Awaitable[object]]] = {
        TaskButton.RESUME: lifecycle.resume_interrupted,
        TaskButton.FAIL: lifecycle.mark_failed,
        TaskButton.FOLLOWUP: card.ask_follow_up,
        TaskButton.TRANSCRIPT: card.send_transcript,
        TaskButton.RETRY: card.retry,
        TaskButton.DIFF: worktree_card.show_diff,
        TaskButton.MERGE: worktree_card.merge,
        TaskButton.DISCARD: partial(worktree_card.discard, confirmed=False),
        TaskButton.DISCARD_YES: partial(worktree_card.discard, confirmed=True),
        TaskButton.ARCHIVE: lambda user, task_id: lifecycle.archive(user, str(task_id)),
        TaskButton.ELSEWHERE: lifecycle.run_elsewhere,
        TaskButton.FRESH: partial(lifecycle.run_elsewhere, fresh=True),
    }
    done = await actions[TaskButton(callback_data.action)](user_id, callback_data.task_id)
    toast = f"toast.{callback_data.action.removesuffix('_yes')}"
    refused = "_refused" if done is False else ""  # a merge or discard that did not happen
    await query.answer(reply.text(toast + refused))


@router.callback_query(Tapped(PreflightAction))
async def on_preflight(
    query: CallbackQuery,
    callback_data: PreflightAction,
    preflight: PreflightStep | None,
    reply: Reply,
    user_id: int,
) -> None:
    """A preflight's suggested answer or "Start anyway": the held task starts."""
    step = preflight
    key = (
        await step.tap(user_id, callback_data.hold_id, callback_data.choice)
        if step is not None
        else "preflight.gone"
    )
    await query.answer(reply.text(key))


@router.callback_query(Tapped(RunDefault))
async def on_run_default(
    query: CallbackQuery,
    callback_data: RunDefault,
    preflight: PreflightStep | None,
    reply: Reply,
    user_id: int,
) -> None:
    """ "Run on <default> instead" under a routed task: back where it was planned, unless it
    has started."""
    step, data = preflight, callback_data
    key = (
        await step.run_default(user_id, data.task_id, data.engine, data.preset)
        if step is not None
        else "preflight.gone"
    )
    await query.answer(reply.text(key))


@router.callback_query()
async def on_stale(query: CallbackQuery, reply: Reply) -> None:
    await query.answer(reply.text("callback.stale"))
