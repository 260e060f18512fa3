"""Task planning: a command's options and prompt turned into a checked NewTask (engine, model
preset, budget, directory, approval mode, worktree, check), before anything is created."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.errors import FileRefused, UserInputError, clean
from bot.git import Worktrees
from bot.models import ApprovalMode, Engine, NewTask, Phrase, RepoHead, TaskKind
from bot.money.desk import MoneyDesk, parse_usd
from bot.settings import Settings
from bot.store import Store
from bot.tasks.checks import given_check, repository_check
from bot.tasks.lineage import Lineage
from bot.tasks.options import approval_mode, flag, split_options
from bot.tasks.options import engine as option_engine
from bot.tasks.placing import PROJECT, Place, Placement
from bot.telegram.render import plain
from bot.telegram.texts import Texts
from bot.workdirs import WorkdirPolicy
from executors import registry

log = logging.getLogger(__name__)
AUTO = "auto"  # ``engine=auto``: the engine and preset the preflight picks (only cheaper)


def _sandbox_everywhere(_engine: Engine) -> Phrase | None:
    return None


@dataclass(frozen=True, slots=True)
class TaskDefaults:
    """What a task gets when its command does not say. ``session_mode``: the approval mode of
    sessions (/claude, /codex); ``detach_mode``: of walk-away tasks (/detach, schedules, task
    files, ``detach add``). ``sandbox_problem``: why an engine cannot run sandboxed on this
    machine (such a task then runs in ``ask`` and its acknowledgement says why)."""

    engine: Engine
    max_prompt_chars: int
    session_mode: ApprovalMode = ApprovalMode.ASK
    detach_mode: ApprovalMode = ApprovalMode.SANDBOX
    worktree: bool = False
    sandbox_problem: Callable[[Engine], Phrase | str | None] = _sandbox_everywhere
    plain_text_tasks: bool = True  # a plain message in a private chat starts a /detach task
    max_attachment_bytes: int = 20 * 1024 * 1024
    attachments_staging: Path = Path("data") / "attachments"  # before a task's directory is known
    timezone: str = "UTC"  # times said to a user who set no /tz
    subtask_engines: frozenset[Engine] = frozenset()  # can be given `detach mcp` (subtasks=yes)
    route_by_default: bool = False  # DETACH_DEFAULT_ENGINE=auto: walk-away tasks as engine=auto

    @classmethod
    def of(
        cls,
        settings: Settings,
        sandbox_problem: Callable[[Engine], Phrase | str | None] | None = None,
    ) -> TaskDefaults:
        """The defaults these settings give, in the bot and in the shell alike;
        ``sandbox_problem``: what this process knows of its sandbox (None: nothing, the bot
        decides when it takes the task)."""
        return cls(
            engine=settings.base_engine,
            route_by_default=settings.default_engine == AUTO,
            max_prompt_chars=settings.max_prompt_chars,
            session_mode=settings.approval_mode,
            detach_mode=settings.detach_mode,
            worktree=settings.worktrees,
            sandbox_problem=sandbox_problem or _sandbox_everywhere,
            plain_text_tasks=settings.plain_text == "task",
            max_attachment_bytes=int(settings.max_attachment_mb * 1024 * 1024),
            attachments_staging=settings.data_dir / "attachments",
            timezone=settings.timezone,
            subtask_engines=frozenset(s.name for s in registry.ENGINES if s.mcp_client),
        )


@dataclass(frozen=True, slots=True)
class Planned:
    """A task's command planned: its checked NewTask, the options it named and its words."""

    new: NewTask
    options: dict[str, str]
    words: str


def valid_prompt(prompt: str, command: str, max_chars: int) -> str:
    """A task's prompt (a goal, a follow-up) cleaned; empty or longer than ``max_chars``: a
    ``UserInputError`` naming ``command``."""
    prompt = clean(prompt).strip()
    if not prompt:
        raise UserInputError("error.empty_goal", command=command)
    if len(prompt) > max_chars:
        raise UserInputError("error.prompt_too_long", chars=len(prompt), limit=max_chars)
    return prompt


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
        mode, note = self._mode(options, kind, engine_name, locale, lineage)
        worktree = self._worktree(options, mode, lineage) and place.here
        explicit = "worktree" in options or (lineage is not None and lineage.in_worktree)
        head = await self._head(cwd, explicit) if worktree else None
        max_usd = parse_usd(options.get("max_usd"), self.money.task_cap_usd)
        check, check_repository, ignored = await self._check(options, cwd, locale, lineage, place)
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

    def _mode(
        self,
        options: dict[str, str],
        kind: TaskKind,
        engine: Engine,
        locale: str,
        lineage: Lineage | None = None,
    ) -> tuple[ApprovalMode, str | None]:
        """The task's approval mode, and a line for its acknowledgement when the sandbox it
        would have had does not work here (the task then asks instead). A sub-task's: one its
        parent may give, the parent's by default (a sandbox that falls back to asking, too)."""
        defaults = self.defaults
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
        reason = plain(self._texts.say(locale, problem))
        return ApprovalMode.ASK, self._texts.get(locale, "task.sandbox_unavailable", reason=reason)

    async def _check(
        self,
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
        top = await self.worktrees.top_level(cwd)
        if top is None:
            return None, None, None
        try:
            command = await asyncio.to_thread(repository_check, top)
        except FileRefused as exc:
            log.warning("%s", exc)
            reason = plain(self._texts.get(locale, exc.key, **exc.params))
            note = self._texts.get(locale, "task.detach_toml_ignored", reason=reason)
            return None, None, plain(note)  # the acknowledgement escapes it
        return command, str(top) if command is not None else None, None

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
