"""Hand-off to a terminal, as the chat shows it: the command that continues a task's session
at a terminal (``cd '<dir>' && claude --resume <id>``, every part shell-quoted: a directory
named ``x; rm -rf ~`` pasted into a shell stays a name), and the buttons that hold a task at
the terminal (🖥 To terminal) and take it back (📱 Take back)."""

from __future__ import annotations

import html
import shlex
from datetime import datetime

from bot.models import Task
from bot.telegram.callbacks import Id, TaskAction, TaskButton
from bot.telegram.markup import Button, CallbackData, Keyboard
from bot.telegram.texts import Texts
from executors import registry


class TakeBack(CallbackData, prefix="tb"):
    """📱 Take back: the task held at the terminal is the phone's again. (🖥 To terminal is a
    card's ``TaskAction``: it follows the task's state as the card's other buttons do.)"""

    task_id: Id
    send: Id = 0  # the refused reply to send once taken back (its message id); 0: none
    hold: Id = 0  # the hold it ends (its start, Unix ms): a later hold's is another


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
    """The card's 🖥 To terminal."""
    return TaskAction.buttons(texts, locale, task_id, [TaskButton.TO_TERMINAL])[0]


def hold_stamp(since: datetime) -> int:
    """A hold's name on its Take back buttons: its start in Unix milliseconds."""
    return int(since.timestamp() * 1000)


def take_back_keyboard(
    texts: Texts, locale: str, task_id: int, parked: int | None = None, hold: int = 0
) -> Keyboard:
    """📱 Take back; with ``parked`` (a refused reply's message id) also "Take back and send it".
    ``hold`` (the hold's start, Unix ms): a button left from an ended hold never ends a
    later one."""
    row = [TakeBack(task_id=task_id, hold=hold).button(texts.get(locale, "button.take_back"))]
    if parked:
        send = TakeBack(task_id=task_id, send=parked, hold=hold)
        row.append(send.button(texts.get(locale, "button.take_back_send")))
    return Keyboard.of([row])
