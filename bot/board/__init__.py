"""The board: a web view of the owner's tasks, live, on the desktop and as a Telegram Mini App
(``server``: HTTP, ``auth``: sign-in, ``views``: what pages show, ``events``: live updates,
``actions``: what its buttons do). Off unless DETACH_BOARD_PORT is set."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.approvals.answers import ApprovalAnswers
    from bot.board.limits import Limits
    from bot.board.server import Board
    from bot.fleet.status import FleetStatus
    from bot.git.worktrees import Worktrees
    from bot.prs.desk import PullRequests
    from bot.settings import Settings
    from bot.tasks.audit import AuditLog
    from bot.tasks.reads import TaskReads
    from bot.tasks.usecases import UseCases
    from bot.telegram.texts import Texts


def make_board(
    settings: Settings,
    *,
    reads: TaskReads,
    texts: Texts,
    worktrees: Worktrees,
    uses: UseCases,
    answers: ApprovalAnswers,
    audit: AuditLog | None = None,
    limits: Limits | None = None,
    prs: PullRequests | None = None,
    fleet: FleetStatus | None = None,
) -> Board | None:
    """The board these settings ask for; None when DETACH_BOARD_PORT is not set (then its
    server, aiohttp's, is not even imported). ``audit``: the task page's audit section (None:
    none shown); ``limits``: by default, from the open-file limit."""
    if settings.board_port is None or settings.bot_token is None:
        return None
    from bot.board.actions import BoardActions
    from bot.board.auth import BoardAuth
    from bot.board.server import Board
    from bot.board.views import BoardData

    return Board(
        auth=BoardAuth(settings.bot_token.get_secret_value(), settings.allowed_users),
        data=BoardData(
            reads,
            texts,
            worktrees,
            uses.preflight.desk if uses.preflight else None,
            audit,
            fleet,
        ),
        actions=BoardActions(answers=answers, uses=uses, prs=prs),
        host=settings.board_host,
        port=settings.board_port,
        public_url=settings.public_url,
        limits=limits,
    )
