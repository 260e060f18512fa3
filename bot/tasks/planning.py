"""Task planning: a command's options and prompt turned into a checked NewTask (engine, model
preset, budget, directory, approval mode, worktree, check), before anything is created."""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.errors import UserInputError
from bot.git.worktrees import Worktrees
from bot.models import ApprovalMode, Engine, NewTask, RepoHead, TaskKind
from bot.money.desk import MoneyDesk, parse_usd
from bot.store import Store
from bot.tasks.defaults import AUTO, TaskDefaults, valid_prompt
from bot.tasks.lineage import Lineage
from bot.tasks.options import engine as option_engine
from bot.tasks.options import flag, split_options
from bot.tasks.placing import PROJECT, Place, Placement
from bot.tasks.planrules import task_check, task_mode
from bot.telegram.render import plain
from bot.telegram.texts import Texts
from bot.workdirs import WorkdirPolicy

__all__ = ["AUTO", "Planned", "TaskDefaults", "TaskPlanner", "valid_prompt"]
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Planned:
    """A task's command planned: its checked NewTask, the options it named and its words."""

    new: NewTask
    options: dict[str, str]
    words: str


class TaskPlanner:
    """Resolves what a new task gets; bad input fails here, with a localized reason."""

    def __init__(
        self,
        *,
        store: Store,
        texts: Texts,
        money: MoneyDesk,
        workdirs: WorkdirPolicy,
        worktrees: Worktrees,
        engines: Collection[Engine],
        defaults: TaskDefaults,
        placement: Placement,
    ) -> None:
        self._store = store
        self.placement = placement
        self._texts = texts
        self.engines = engines  # those tasks may use (here, or on scale-out workers)
        self.defaults = defaults
        self.default_engine = defaults.engine
        self.money = money
        self.workdirs = workdirs
        self.worktrees = worktrees

    def validate_prompt(self, prompt: str, command: str) -> str:
        return valid_prompt(prompt, command, self.defaults.max_prompt_chars)

    async def plan(
        self,
        user_id: int,
        chat_id: int,
        kind: TaskKind,
        options: dict[str, str],
        prompt: str,
        locale: str,
        command: str,
        engine: Engine | None = None,
        slug: str | None = None,
        lineage: Lineage | None = None,
    ) -> NewTask:
        """A checked NewTask from options (``model=``, ``cwd=``, ...) and a prompt: the model
        preset, budget, directory and mode resolved now, so bad input fails before anything
        is created. Under ``lineage`` (a sub-task) each is capped by its parent's rights."""
        if lineage is not None:
            lineage.depth_allowed()
        routed = options.get("engine", "").lower() == AUTO  # the preflight may route it
        chosen = engine or (
            option_engine(options, self.default_engine, self.engines)
            if "engine" in options and not routed
            else None
        )
        chat = await self._store.chats.get(chat_id)
        preset = self.money.preset_for(chat.preset, options.get("model"), chosen)
        engine_name = chosen or (preset.engine if preset else self.default_engine)
        place = await self._place(options, chat.host, chat.cwd, lineage)
        cwd = await self._cwd(chat_id, chat.cwd, options.get("cwd"), lineage, place)
        mode, note = task_mode(
            self.defaults, self._texts, options, kind, engine_name, locale, lineage
        )
        worktree = self._worktree(options, mode, lineage) and place.here
        explicit = "worktree" in options or (lineage is not None and lineage.in_worktree)
        head = await self._head(cwd, explicit) if worktree else None
        max_usd = parse_usd(options.get("max_usd"), self.money.task_cap_usd)
        check, check_repository, ignored = await task_check(
            self.worktrees, self._texts, options, cwd, locale, lineage, place
        )
        away = await self._host_away(place, locale)
        note = "\n".join(line for line in (note, ignored, away) if line) or None
        return NewTask(
            owner_id=user_id,
            chat_id=chat_id,
            engine=engine_name,
            preset=preset.name if preset else None,
            model=preset.model if preset else None,
            max_usd=lineage.budget(max_usd) if lineage is not None else max_usd,
            kind=kind,
            prompt=self.validate_prompt(prompt, command),
            cwd=cwd,
            locale=locale,
            approval_mode=mode,
            worktree=head is not None,
            head=head,
            slug=slug,
            check=check,
            check_repository=check_repository,
            note=note,
            subtasks=self._subtasks(options, engine_name)
            if lineage is None
            else lineage.child_subtasks(),
            parent_id=lineage.parent.id if lineage is not None else None,
            host=place.host,
            project=place.project,
            host_offline=away is not None,
        )

    async def plan_text(
        self,
        user_id: int,
        chat_id: int,
        kind: TaskKind,
        text: str,
        locale: str,
        command: str,
        *,
        engine: Engine | None = None,
        with_options: bool = True,
        attached: str = "",
        defaults: Mapping[str, str] | None = None,
    ) -> Planned:
        """A task command as it is typed (``[key=value ...] goal``; ``with_options=False``: all
        goal) planned, or a ``UserInputError``: the one road of the chat and ``detach add``.
        ``attached``: what the prompt says of attached files; ``defaults``: options where the
        text names none (the shell's directory)."""
        options, words = split_options(text) if with_options else ({}, text)
        options = {**(defaults or {}), **options}
        new = await self.plan(
            user_id, chat_id, kind, options, words + attached, locale, command, engine
        )
        return Planned(new, options, words)

    async def _place(
        self,
        options: dict[str, str],
        chat_host: str | None,
        chat_cwd: str | None,
        lineage: Lineage | None,
    ) -> Place:
        """Its host pin and project; a sub-task works in its parent's directory, so on the
        host its parent ran on."""
        if lineage is None:
            return await self.placement.place(options, chat_host, chat_cwd)
        return Place(lineage.parent.session_host or lineage.parent.host)

    async def _host_away(self, place: Place, locale: str) -> str | None:
        """The acknowledgement's line when the task's host is offline: it waits for it."""
        if place.host is None or await self.placement.online(place.host):
            return None
        return plain(self._texts.get(locale, "task.host_offline", host=place.host))

    async def _cwd(
        self,
        chat_id: int,
        stored: str | None,
        typed: str | None,
        lineage: Lineage | None,
        place: Place,
    ) -> Path:
        """``cwd=`` inside an allowed directory (the chat's by default); a sub-task's inside
        its parent's (the parent's by default); a project's (another host's is its to check)."""
        if place.cwd is not None:
            return self.workdirs.resolve(str(place.cwd)) if place.here else place.cwd
        if lineage is not None:
            return self.workdirs.resolve(typed or ".", lineage.cwd, roots=(lineage.cwd,))
        chat_dir = self._allowed_dir(chat_id, stored)
        return self.workdirs.resolve(typed, chat_dir) if typed is not None else chat_dir

    def _worktree(
        self, options: dict[str, str], mode: ApprovalMode, lineage: Lineage | None
    ) -> bool:
        """``worktree=``; by default yes in sandbox mode; always under a worktree parent."""
        default = self.defaults.worktree or mode is ApprovalMode.SANDBOX
        if lineage is None:
            return flag(options, "worktree", default)
        asked = flag(options, "worktree", default) if "worktree" in options else None
        return lineage.worktree(asked, default)

    async def _head(self, cwd: Path, explicit: bool) -> RepoHead | None:
        """The repository a worktree is cut from (one git process, looked up once for the
        task): asked for, a directory outside a repository is refused; by default, the worktree
        applies only where there is one."""
        if explicit:
            return await self.worktrees.head(cwd)
        return await self.worktrees.head_if_any(cwd)

    def _subtasks(self, options: dict[str, str], engine: Engine) -> bool:
        """``subtasks=yes``: the task's agent may start sub-tasks (engines that take MCP
        servers only)."""
        wanted = flag(options, "subtasks", False)
        if wanted and engine not in self.defaults.subtask_engines:
            known = ", ".join(sorted(self.defaults.subtask_engines)) or "–"
            raise UserInputError("error.subtasks_engine", engine=engine, engines=known)
        return wanted

    async def current_dir(self, chat_id: int) -> Path:
        """The chat's /cd choice while it is still allowed, else the default directory."""
        return self._allowed_dir(chat_id, await self._store.chats.cwd(chat_id))

    def _allowed_dir(self, chat_id: int, stored: str | None) -> Path:
        if stored and not stored.startswith(PROJECT):  # a project: each host's own path
            try:
                return self.workdirs.check(Path(stored))
            except UserInputError:
                log.warning("chat %s: stored directory no longer allowed", chat_id)
        return self.workdirs.default
