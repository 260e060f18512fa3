"""The owner's audit, read back: approvals, grants, check consents, budget decisions and
cancels of their own tasks, newest first, a page at a time, each a localized line. Only rows
the owner made (or their tasks' desks made for them) are read; another user's never."""

from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import UTC, datetime

from bot.approvals.view import grant_rule
from bot.models import ApprovalAnswer
from bot.store import AuditEntry, Store
from bot.store.db import utcnow
from bot.telegram.render import age, usd
from bot.telegram.texts import Texts

# the audit's actions the owner reads (``audit.record`` writes these and others)
SHOWN = (
    "approval",  # the desk's outcome of an approval (tool: answer)
    "check_consent",  # a repository's check, allowed or not
    "grant_added",
    "grant_revoked",
    "budget_extended",
    "budget_stopped",
    "task_cancelled",
)
PAGE_SIZE = 10
MAX_PAGE = 10_000  # a callback's page beyond this is not ours


@dataclass(frozen=True, slots=True)
class AuditLine:
    at: datetime
    action: str
    task_id: int | None
    label: str  # the task's label, "–" for none (a revoked grant)
    text: str  # what happened, in the owner's language (HTML-escaped where it shows input)


@dataclass(frozen=True, slots=True)
class AuditPage:
    lines: list[AuditLine]
    page: int  # from 0, the newest
    has_older: bool


class AuditLog:
    def __init__(self, store: Store, texts: Texts) -> None:
        self._store = store
        self._texts = texts

    async def page(self, user_id: int, locale: str, page: int = 0) -> AuditPage:
        """Page ``page`` (0: the newest) of ``user_id``'s own audit lines."""
        page = min(max(page, 0), MAX_PAGE)
        rows = await self._store.audit.of_user(
            user_id, SHOWN, offset=page * PAGE_SIZE, limit=PAGE_SIZE + 1
        )
        lines = [await self._line(locale, row) for row in rows[:PAGE_SIZE]]
        return AuditPage(lines, page, len(rows) > PAGE_SIZE)

    async def of_task(self, user_id: int, task_id: int, locale: str) -> list[AuditLine]:
        """The newest 50 audit lines of one of ``user_id``'s tasks."""
        rows = await self._store.audit.of_user(user_id, SHOWN, limit=50, task_id=task_id)
        return [await self._line(locale, row) for row in rows]

    def render(self, locale: str, page: AuditPage, now: datetime | None = None) -> str:
        """The chat's message for ``page``."""
        if not page.lines:
            return self._texts.get(locale, "audit.empty" if page.page == 0 else "audit.no_more")
        now = now or utcnow()
        head = self._texts.get(locale, "audit.header", page=page.page + 1)
        body = [
            self._texts.raw(
                locale,
                "audit.line",
                age=age(_aware(x.at), now),
                label=html.escape(x.label, quote=False),
                what=x.text,
            )
            for x in page.lines
        ]
        return "\n".join([head, *body])

    async def _line(self, locale: str, row: AuditEntry) -> AuditLine:
        task = await self._store.tasks.get(row.task_id) if row.task_id is not None else None
        label = task.label if task is not None else "–"
        return AuditLine(row.at, row.action, row.task_id, label, self._what(locale, row))

    def _what(self, locale: str, row: AuditEntry) -> str:
        get, detail = self._texts.get, row.detail
        if row.action == "approval":  # "Bash: allow", "Bash: granted Bash(ls:*)"
            tool, _, answer = detail.rpartition(": ")
            if answer.startswith("granted ") or not tool:
                return get(locale, "audit.approval_granted", tool=tool or detail)
            return get(locale, "audit.approval", tool=tool, answer=self._answer(locale, answer))
        if row.action == "check_consent":
            return get(locale, "audit.check_consent", answer=self._answer(locale, detail))
        if row.action in ("budget_extended", "budget_stopped"):
            return get(locale, f"audit.{row.action}", amount=usd(_number(detail)))
        if row.action in ("grant_added", "grant_revoked"):
            detail = grant_rule(detail)
        return get(locale, f"audit.{row.action}", detail=detail)

    def _answer(self, locale: str, answer: str) -> str:
        known = answer in {a.value for a in ApprovalAnswer}
        return self._texts.get(locale, f"audit.answer_{answer}") if known else answer


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return 0.0


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)
