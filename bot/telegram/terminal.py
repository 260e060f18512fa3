"""Hand-off to a terminal, as the chat shows it: the command that continues a task's session
at a terminal (``cd '<dir>' && claude --resume <id>``, every part shell-quoted: a directory
named ``x; rm -rf ~`` pasted into a shell stays a name), and the buttons that hold a task at
the terminal (🖥 To terminal) and take it back (📱 Take back)."""

from __future__ import annotations

import html
import shlex
from enum import StrEnum

from bot.models import Task
from bot.telegram.callbacks import Id
from bot.telegram.markup import Button, CallbackData, Keyboard
from bot.telegram.texts import Texts
from executors import registry


class TerminalButton(StrEnum):
    """What a hand-off button does (``TerminalAction.action``; caption ``button.<value>``)."""

    HOLD = "to_terminal"  # the terminal has the session: phone replies are refused
    TAKE_BACK = "take_back"  # the phone has it again


class TerminalAction(CallbackData, prefix="tm"):
    action: TerminalButton
    task_id: Id


def resume_argv(engine: str) -> tuple[str, ...]:
    """The argv that resumes one of ``engine``'s sessions at a terminal, before the session
    id (empty: the engine has no terminal CLI, as ``/local``)."""
    return next((s.terminal_resume for s in registry.ENGINES if s.name == engine), ())


def terminal_command(task: Task) -> str | None:
    """``cd '<dir>' && claude --resume <id>``, safe to paste into a POSIX shell whatever the
    directory or the id hold; None when the task has no session a terminal CLI can resume."""
    argv = resume_argv(task.engine)
    if not argv or not task.session_id:
        return None
    resume = " ".join(shlex.quote(part) for part in (*argv, task.session_id))
    return f"cd {shlex.quote(task.cwd)} && {resume}"


def terminal_line(texts: Texts, task: Task) -> str:
    """The card's line: the command, monospace (a tap copies it); "" when there is none."""
    command = terminal_command(task)
    if command is None:
        return ""
    return texts.raw(task.locale, "terminal.line", command=html.escape(command, quote=False))


def hold_button(texts: Texts, locale: str, task_id: int) -> Button:
    caption = texts.get(locale, f"button.{TerminalButton.HOLD}")
    return TerminalAction(action=TerminalButton.HOLD, task_id=task_id).button(caption)


def take_back_keyboard(texts: Texts, locale: str, task_id: int) -> Keyboard:
    caption = texts.get(locale, f"button.{TerminalButton.TAKE_BACK}")
    action = TerminalAction(action=TerminalButton.TAKE_BACK, task_id=task_id)
    return Keyboard.of([[action.button(caption)]])
