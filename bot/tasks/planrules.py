"""The rights and the check a planned task gets: its approval mode (the sandbox falls back to
asking where it does not work here, with a line saying why) and its check (``check=``, a
parent's, or the repository's ``.detach.toml``)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from bot.errors import FileRefused
from bot.git.worktrees import Worktrees
from bot.models import ApprovalMode, Engine, TaskKind
from bot.tasks.checks import given_check, repository_check
from bot.tasks.defaults import TaskDefaults
from bot.tasks.lineage import Lineage
from bot.tasks.options import approval_mode
from bot.tasks.placing import Place
from bot.telegram.render import plain
from bot.telegram.texts import Texts

log = logging.getLogger(__name__)


def task_mode(
    defaults: TaskDefaults,
    texts: Texts,
    options: dict[str, str],
    kind: TaskKind,
    engine: Engine,
    locale: str,
    lineage: Lineage | None = None,
) -> tuple[ApprovalMode, str | None]:
    """The task's approval mode, and a line for its acknowledgement when the sandbox it
    would have had does not work here (the task then asks instead). A sub-task's: one its
    parent may give, the parent's by default (a sandbox that falls back to asking, too)."""
    default = defaults.detach_mode if kind is TaskKind.DETACH else defaults.session_mode
    if lineage is not None:
        default = lineage.mode(approval_mode(options, default) if "mode" in options else None)
    mode = approval_mode(options, default) if lineage is None else default
    if mode is not ApprovalMode.SANDBOX:
        return mode, None
    problem = defaults.sandbox_problem(engine)
    if problem is None:
        return mode, None
    if lineage is not None:
        lineage.mode(ApprovalMode.ASK)  # no sandbox here: asking instead must be allowed
    log.warning("%s: no sandbox here (%s); the task runs in ask mode", engine, problem)
    reason = plain(texts.say(locale, problem))
    return ApprovalMode.ASK, texts.get(locale, "task.sandbox_unavailable", reason=reason)


async def task_check(
    worktrees: Worktrees,
    texts: Texts,
    options: dict[str, str],
    cwd: Path,
    locale: str,
    lineage: Lineage | None = None,
    place: Place | None = None,
) -> tuple[str | None, str | None, str | None]:
    """The check and, when it is the repository's (``.detach.toml``, not typed by the
    owner: it runs once the owner approved it), that repository; and a line for the
    acknowledgement when that file was not read (the task goes on without it). ``check=``
    (``check=no``: none) is the owner's; a sub-task's is its parent's (it may name none)."""
    if lineage is not None:
        return lineage.check(options.get("check")), lineage.parent.check_repository, None
    if "check" in options:
        return given_check(options["check"]), None, None
    if place is not None and not place.here:  # another host's directory: not ours to read
        return None, None, None
    top = await worktrees.top_level(cwd)
    if top is None:
        return None, None, None
    try:
        command = await asyncio.to_thread(repository_check, top)
    except FileRefused as exc:
        log.warning("%s", exc)
        reason = plain(texts.get(locale, exc.key, **exc.params))
        note = texts.get(locale, "task.detach_toml_ignored", reason=reason)
        return None, None, plain(note)  # the acknowledgement escapes it
    return command, str(top) if command is not None else None, None
