"""The use cases every door calls (the chat's handlers, the board and its Mini App, voice drafts,
the inbox's task files, schedules, `detach mcp`): one bundle, built once by the composition root
(``bot.app``); each door takes the use cases it needs, translates its input and renders what
they answer. Handlers receive each field by its name (aiogram's workflow data)."""

from __future__ import annotations

from dataclasses import dataclass

from bot.money.desk import MoneyDesk
from bot.tasks.adoption import Adoption
from bot.tasks.card import TaskCard
from bot.tasks.chat import ChatSettings
from bot.tasks.followup import FollowUps
from bot.tasks.handover import Handover
from bot.tasks.heldanswer import HeldAnswers
from bot.tasks.lifecycle import TaskLifecycle
from bot.tasks.lookup import TaskLookup
from bot.tasks.preflighting import PreflightStep
from bot.tasks.requests import TaskRequests
from bot.tasks.steering import SteerDesk
from bot.tasks.terminal import TerminalDesk
from bot.tasks.worktree import WorktreeCard
from bot.telegram.held import HeldFiles


@dataclass(frozen=True, slots=True, kw_only=True)
class UseCases:
    create: TaskRequests  # plan, preflight, start: chat requests and walk-away starts
    follow_up: FollowUps  # a reply from any door: steer or queue
    lookup: TaskLookup  # a user's tasks: by id, message, topic; /tasks
    lifecycle: TaskLifecycle  # cancel, archive, resume or fail an interrupted task
    card: TaskCard  # a card's buttons: follow up, transcript, retry, budget; /result
    worktree_card: WorktreeCard  # show diff, merge, discard
    handover: Handover  # a task waiting for its engine's limit carried to another
    terminal: TerminalDesk  # hold at the terminal, take back
    adoption: Adoption  # /adopt: a terminal's session becomes a task
    chat: ChatSettings  # /cd, /notify, /tz, the engines' limits
    money_desk: MoneyDesk  # /model, /spend
    held_files: HeldFiles  # a file sent without words, held for them
    held_answers: HeldAnswers  # the words that start (or continue) a task with them
    preflight: PreflightStep | None  # held tasks' answers (None: no preflight model here)
    steering: SteerDesk | None  # Steer now / Queue (None: follow-ups only queue)
