"""What a task gets when its command does not say (``TaskDefaults``, from the settings), and the
check every prompt passes (``valid_prompt``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bot.errors import UserInputError, clean
from bot.models import ApprovalMode, Engine, Phrase
from bot.settings import Settings
from executors import registry

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


def valid_prompt(prompt: str, command: str, max_chars: int) -> str:
    """A task's prompt (a goal, a follow-up) cleaned; empty or longer than ``max_chars``: a
    ``UserInputError`` naming ``command``."""
    prompt = clean(prompt).strip()
    if not prompt:
        raise UserInputError("error.empty_goal", command=command)
    if len(prompt) > max_chars:
        raise UserInputError("error.prompt_too_long", chars=len(prompt), limit=max_chars)
    return prompt
