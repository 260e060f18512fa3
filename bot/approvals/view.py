"""How approvals and agent questions look in Telegram: texts and keyboards (no I/O)."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from bot.events import ApprovalRequest, Question
from bot.models import Task
from bot.telegram.callbacks import Id
from bot.telegram.markup import CallbackData, Keyboard
from bot.telegram.render import shorten, usd
from bot.telegram.texts import Texts


class ApprovalChoice(StrEnum):
    """The button an approval message's owner tapped (``ApprovalAction.choice``, in the callback
    data as its value). Not the answer (``bot.models.ApprovalAnswer``): ``ALWAYS`` only asks to
    confirm, ``CONFIRM`` answers "always", ``BACK`` shows the first buttons again."""

    ALLOW = "allow"
    DENY = "deny"
    ALWAYS = "always"
    CONFIRM = "confirm"
    BACK = "back"


APPROVAL_CHOICES = tuple(ApprovalChoice)
DONE = -1
CHECK_GRANTS = "check"  # a grant's engine for a repository's check: never an agent's tool


def check_pattern(command: str) -> str:
    """A remembered "Always" for one exact check command (its sha256) in one repository (the
    grant's cwd), readable in /grants: ``Check 3f2a…: make test``."""
    digest = hashlib.sha256(command.encode()).hexdigest()[:16]
    return f"Check {digest}: {shorten(command, 60, one_line=True)}"


def grant_rule(pattern: str) -> str:
    """A grant's rule as its owner reads it: a check's command without its hash."""
    found = _CHECK_RULE.fullmatch(pattern)
    return found[1] if found else pattern


_CHECK_RULE = re.compile(r"Check [0-9a-f]{16}: (.*)", re.DOTALL)


def check_consent_text(
    texts: Texts, task: Task, command: str, repository: str, timeout_s: float
) -> str:
    """The whole command (escaped, never cut) and the repository that asks to run it."""
    loc = task.locale
    head = texts.get(loc, "check.consent", label=task.label, repository=repository, command=command)
    tail = texts.get(loc, "approval.expires", minutes=max(1, round(timeout_s / 60)))
    return f"{head}\n{tail}"


class ApprovalAction(CallbackData, prefix="ap"):
    qid: Id
    choice: ApprovalChoice


class QuestionAction(CallbackData, prefix="aq"):
    qid: Id
    # index into the question's options; DONE closes a multi-select
    option: Annotated[int, Field(ge=DONE, le=99)]


class GrantAction(CallbackData, prefix="gr"):
    grant_id: Id


class BudgetAction(CallbackData, prefix="bu"):
    qid: Id
    extend: bool


def budget_keyboard(texts: Texts, loc: str, qid: int, extend_usd: float) -> Keyboard:
    return Keyboard.of(
        [
            [
                BudgetAction(qid=qid, extend=True).button(
                    texts.get(loc, "money.extend", extend=usd(extend_usd))
                ),
                BudgetAction(qid=qid, extend=False).button(texts.get(loc, "money.stop")),
            ]
        ]
    )


def describe(texts: Texts, loc: str, request: ApprovalRequest) -> list[str]:
    """Exactly what the tool wants: the command, the path, a short summary of an edit."""
    data: dict[str, Any] = request.tool_input
    lines: list[str] = []
    if data.get("dangerouslyDisableSandbox") is True:  # the agent asks to leave the sandbox
        lines.append(texts.get(loc, "approval.unsandboxed"))
    if request.tool_name == "SandboxNetworkAccess" and isinstance(data.get("host"), str):
        lines.append(texts.get(loc, "approval.host", host=data["host"]))
    if isinstance(data.get("command"), str):
        lines.append(texts.get(loc, "approval.command", command=shorten(data["command"], 1500)))
    path = data.get("file_path") or data.get("path") or data.get("notebook_path")
    if isinstance(path, str):
        lines.append(texts.get(loc, "approval.path", path=path))
    if isinstance(data.get("old_string"), str):
        old, new = data["old_string"], str(data.get("new_string", ""))
        diff = "\n".join(
            [f"- {x}" for x in old.splitlines()[:6]] + [f"+ {x}" for x in new.splitlines()[:6]]
        )
        lines.append(texts.get(loc, "approval.detail", detail=shorten(diff, 1200)))
    elif isinstance(data.get("content"), str):
        head = "\n".join(data["content"].splitlines()[:8])
        lines.append(texts.get(loc, "approval.detail", detail=shorten(head, 1200)))
    if not lines or lines == [texts.get(loc, "approval.unsandboxed")]:
        lines.append(
            texts.get(
                loc,
                "approval.detail",
                detail=shorten(json.dumps(data, ensure_ascii=False, indent=1), 1200),
            )
        )
    description = data.get("description")
    if isinstance(description, str) and description.strip():
        lines.append(texts.get(loc, "approval.description", description=description.strip()))
    elif isinstance(data.get("command"), str) and (program := _program(data["command"])):
        lines.append(texts.get(loc, "approval.runs", program=program))  # Codex gives no reason
    return lines


def _program(command: str) -> str | None:
    """The program a shell command runs (through ``bash -lc '…'`` too), for a description."""
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    if len(words) > 2 and Path(words[0]).name in _SHELLS and words[1] in ("-c", "-lc"):
        return _program(words[2])
    return Path(words[0]).name if words else None


_SHELLS = frozenset({"sh", "bash", "zsh", "dash"})


def approval_text(texts: Texts, task: Task, request: ApprovalRequest, timeout_s: float) -> str:
    loc = task.locale
    head = texts.get(loc, "approval.request", label=task.label, tool=request.tool_name)
    tail = texts.get(loc, "approval.expires", minutes=max(1, round(timeout_s / 60)))
    return "\n".join([head, *describe(texts, loc, request), tail])


def approval_keyboard(texts: Texts, loc: str, qid: int) -> Keyboard:
    row = [
        ApprovalAction(qid=qid, choice=c).button(texts.get(loc, f"approval.{c}"))
        for c in (ApprovalChoice.ALLOW, ApprovalChoice.DENY, ApprovalChoice.ALWAYS)
    ]
    return Keyboard.of([row])


def confirm_keyboard(texts: Texts, loc: str, qid: int) -> Keyboard:
    row = [
        ApprovalAction(qid=qid, choice=c).button(texts.get(loc, f"approval.{key}"))
        for c, key in ((ApprovalChoice.CONFIRM, "confirm_always"), (ApprovalChoice.BACK, "back"))
    ]
    return Keyboard.of([row])


def question_text(texts: Texts, task: Task, question: Question) -> str:
    return texts.get(
        task.locale,
        "approval.question",
        label=task.label,
        header=question.header or "?",
        question=question.text,
    )


def question_item(payload: dict[str, Any]) -> Question:
    """The agent's question a pending question's payload holds."""
    return Question(
        payload["text"], payload["header"], tuple(payload["options"]), bool(payload["multi"])
    )


def question_keyboard(
    texts: Texts, loc: str, qid: int, question: Question, selected: list[int]
) -> Keyboard:
    rows = [
        [
            QuestionAction(qid=qid, option=i).button(
                ("☑️ " if i in selected else "") + shorten(option, 60)
            )
        ]
        for i, option in enumerate(question.options)
    ]
    if question.multi:
        done = QuestionAction(qid=qid, option=DONE).button(texts.get(loc, "approval.question_done"))
        rows.append([done])
    return Keyboard.of(rows)
