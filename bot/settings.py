"""Settings: the public configuration interface (env vars with the DETACH_ prefix, or the
settings file ``bot.config`` finds)."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.models import ApprovalMode, OwnerTools, Preset, ProcessRole, TopicMode
from executors.claude import ClaudeSettings
from executors.codex import CodexSettings
from executors.denied import secret_names
from executors.local import LocalSettings
from executors.managed_settings import ManagedSettings

TELEGRAM_API_URL = "https://api.telegram.org"
TOKEN_SHAPE = re.compile(r"[0-9]{1,20}:[A-Za-z0-9_-]{1,100}")


MIN_PASSWORD_CHARS = 8  # as bot.redaction's MIN_SECRET_CHARS


class Settings(BaseSettings, ClaudeSettings, CodexSettings, LocalSettings, ManagedSettings):
    """Everything Detach reads from its environment; built once, in the composition root.
    Each engine declares its own settings (DETACH_<ENGINE>_*) in its module; they are bases
    of this class, one per engine of ``executors.registry``."""

    model_config = SettingsConfigDict(env_prefix="DETACH_", env_file=None, extra="ignore")

    bot_token: SecretStr | None = None
    allowed_users: Annotated[frozenset[int], NoDecode] = frozenset()
    # who owns this machine's terminal sessions (/adopt): these allowed users, else the first
    # of DETACH_ALLOWED_USERS as written (``owners``)
    admins: Annotated[tuple[int, ...], NoDecode] = ()
    data_dir: Path = Path("data")
    database_url: str | None = None
    telegram_api_url: str = TELEGRAM_API_URL
    workdir: Path | None = None
    allowed_workdirs: Annotated[tuple[Path, ...], NoDecode] = ()
    max_concurrent_turns: int = Field(default=2, ge=1, le=64)
    turn_timeout_s: float = Field(default=2700, gt=0)
    config: Path | None = None
    # the owner's capabilities preamble: told to every turn's agent before Detach's own (a
    # preset's ``preamble`` wins); read at each turn's start, at most 16 KB
    preamble_file: Path | None = None
    default_engine: str = "claude"  # "auto": walk-away tasks go where their preflight routes
    max_prompt_chars: int = Field(default=20_000, ge=100)
    cancel_grace_s: float = Field(default=5.0, gt=0)
    # agents, their tools and checks run at this lower CPU priority (nice): the bot answers at
    # once while they keep every core busy; 0: the bot's own priority
    agent_nice: int = Field(default=10, ge=0, le=19)
    # one agent process started ahead for the next new task like the last one (same
    # directory, mode, settings: executors.warm), stopped after warm_ttl_s unused
    warm_agents: bool = False
    warm_ttl_s: float = Field(default=600, gt=0)
    # the next agent's process chain (nice, setpriv, its PID namespace) started ahead and
    # waiting for its argv and environment: executors.ahead; off: each starts at its spawn
    spawn_ahead: bool = True
    intake_interval_s: float = Field(default=0.5, gt=0)
    progress_interval_s: float = Field(default=3.0, gt=0)
    max_attachment_mb: float = Field(default=20, gt=0, le=20)  # the Bot API serves up to 20 MB
    # delivered outbox rows and archived tasks' transcripts older than this are pruned (the
    # bytes of delivered files at once); 0: kept forever
    retention_days: float = Field(default=90, ge=0)
    plain_text: Literal["task", "help"] = "task"  # a plain private message: a task, or help
    # a follow-up while its task's turn runs, untapped for reply_choice_s: after it, or into it
    reply_default: Literal["queue", "steer"] = "queue"
    reply_choice_s: float = Field(default=10.0, gt=0, le=600)
    topics: TopicMode = TopicMode.TASK  # with forum topics on: a topic per task, or per project
    progress_delay_s: float = Field(default=5.0, ge=0)  # a turn shorter than this: no progress
    outbox_chat_interval_s: float = Field(default=1.0, ge=0)
    outbox_group_interval_s: float = Field(default=3.0, ge=0)
    outbox_chat_burst: int = Field(default=3, ge=1)  # messages a chat may get at once
    daily_cap_usd: float | None = None
    task_cap_usd: float | None = Field(default=None, gt=0)
    approval_timeout_s: float = Field(default=600, gt=0)
    limit_retry_s: float = Field(default=900, gt=0)  # a usage limit that names no reset time
    # an agent that says nothing this long: its turn gets one watchdog message (Stop / Keep
    # waiting); seconds, down to 0.2 (tests)
    stall_s: float = Field(default=600, ge=0.2)
    limit_warn_percent: float = Field(default=80, gt=0, le=100)  # a plan's window: one warning
    mcp_chat: int | None = None  # `detach mcp`: whose tasks (default: the first allowed user)
    max_subtasks: int = Field(default=5, ge=0, le=50)  # per task with subtasks=yes
    subtask_depth: int = Field(default=2, ge=1, le=3)  # levels below a task with subtasks=yes
    # an agent's `notify` notes to the chat: the least gap between two, and the most per task
    notify_gap_s: float = Field(default=30.0, ge=0, le=3600)
    notify_max: int = Field(default=10, ge=0, le=100)
    # whose agents get `notify` and `ask_owner` (bot.mcp.owner): /detach tasks by default
    owner_tools: OwnerTools = OwnerTools.WALKAWAY
    ask_unattended: bool = True  # no: a task a schedule started may not `ask_owner`
    approval_mode: ApprovalMode = ApprovalMode.ASK  # /claude, /codex and other sessions
    # /detach, schedules, task files, `detach add`: sandboxed where the sandbox works, else ask
    detach_mode: ApprovalMode = ApprovalMode.SANDBOX
    sandbox_allowed_domains: Annotated[tuple[str, ...], NoDecode] = ()
    # more paths a sandboxed task may not read, beyond the bot's own files and the usual keys
    sandbox_deny_read: Annotated[tuple[Path, ...], NoDecode] = ()
    check_timeout_s: float = Field(default=900, gt=0)
    check_rounds: int = Field(default=2, ge=1, le=10)
    # front: turns run on `detach worker` processes (a worker is started as one, not set here)
    role: Literal[ProcessRole.ALL, ProcessRole.FRONT] = ProcessRole.ALL
    # a runner (worker or bot) silent this long is gone: another takes its turns over
    worker_lease_s: float = Field(default=30, ge=3, le=3600)
    # this process's host name on a shared database ("": the machine's name), and the projects
    # it has: name=path,… (/hosts lists them)
    host_name: str = Field(default="", max_length=64)
    projects: Annotated[tuple[tuple[str, Path], ...], NoDecode] = ()
    # a submitted turn no host is pinned to is left this long to the host with the most of its
    # plan left (then free slots) before any host it fits takes it
    host_preference_s: float = Field(default=5, ge=0, le=600)
    timezone: str = "UTC"  # for /every and /at until a user sets /tz
    worktrees: bool = False  # every task in its own git worktree unless worktree=no
    # pull requests from the card (bot.prs): the remote pushed to ("": the one the base branch
    # tracks, else origin), GitHub's REST base, its token when neither gh nor GITHUB_TOKEN has one
    pr_remote: str = ""
    pr_draft: bool = True
    pr_notify_failed: bool = False  # a failed check of a followed PR buzzes
    pr_poll_s: float = Field(default=60, ge=0.2)  # how often followed PRs are looked at
    pr_push_timeout_s: float = Field(default=120, gt=0)
    github_api_url: str = "https://api.github.com"
    github_token: SecretStr | None = None
    github_repo: str = ""  # owner/name the PRs go to ("": read from the remote's URL)
    gh_bin: str = "gh"  # its `gh auth token` is asked first
    # the board (bot.board): a web view of the tasks, served while this is set
    board_port: int | None = Field(default=None, ge=0, le=65535)  # 0: any free port (tests)
    board_host: str = "127.0.0.1"
    public_url: str | None = None  # https://…: the board as a Telegram Mini App, through a proxy
    # a cheap model's look at a walk-away task before it starts (bot.preflight): off unless on
    preflight: bool = False
    preflight_model: str = ""  # a preset's name; "": the cheapest Claude preset
    preflight_wait_s: float = Field(default=1800, gt=0)  # for the owner's answer to its question
    # a task the preflight routed waits this long before it starts ("Run on <default> instead")
    preflight_route_grace_s: float = Field(default=15, ge=0, le=600)
    # voice notes (bot.voice): a transcription server with OpenAI's API (a local whisper server
    # or a hosted one), else the offline recognizer (Whisper base; pocketsphinx as a fallback)
    stt_base_url: str | None = None  # http://127.0.0.1:8000/v1 → POST …/audio/transcriptions
    stt_model: str = "whisper-1"
    stt_api_key: SecretStr | None = None
    stt_max_s: float = Field(default=300, gt=0, le=3600)  # a longer note is cut, and says so
    stt_timeout_s: float = Field(default=180, gt=0)  # one note's transcription, at most
    auto_allowed_tools: Annotated[tuple[str, ...], NoDecode] = (
        "Bash",
        "Edit",
        "MultiEdit",
        "Write",
        "NotebookEdit",
        "Read",
        "Glob",
        "Grep",
        "LS",
        "TodoWrite",
        "WebFetch",
        "WebSearch",
    )

    @field_validator("bot_token", mode="before")
    @classmethod
    def _check_token(cls, value: object) -> object:
        """The shape @BotFather gives (the value itself never goes into a message)."""
        if isinstance(value, str):
            value = value.strip()
            if not value:
                return None
            if not TOKEN_SHAPE.fullmatch(value):
                raise ValueError(
                    "this is not a bot token: @BotFather's look like 123456789:AAE…, digits, a "
                    "colon, then letters (check for quotes, spaces or a cut-off part)"
                )
        return value

    @model_validator(mode="before")
    @classmethod
    def _first_user_owns(cls, data: object) -> object:
        """No DETACH_ADMINS: the first id of DETACH_ALLOWED_USERS as written owns the machine."""
        if isinstance(data, dict) and not data.get("admins"):
            users = data.get("allowed_users")
            parts = users.replace(" ", "").split(",") if isinstance(users, str) else []
            first = next((part for part in parts if part), "")
            if first.lstrip("-").isdigit():  # a wrong one: the field's own check names it
                return {**data, "admins": first}
        return data

    @field_validator("allowed_users", mode="before")
    @classmethod
    def _parse_users(cls, value: object) -> object:
        if isinstance(value, str):
            return frozenset(_user_ids(value))
        if isinstance(value, int):
            return frozenset({value})
        return value

    @field_validator("admins", mode="before")
    @classmethod
    def _parse_admins(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(_user_ids(value))
        if isinstance(value, int):
            return (value,)
        return value

    @field_validator("admins")
    @classmethod
    def _admins_are_allowed(cls, value: tuple[int, ...], info: ValidationInfo) -> tuple[int, ...]:
        if "allowed_users" not in info.data:
            return value  # DETACH_ALLOWED_USERS itself is wrong: its own check says so
        allowed = info.data["allowed_users"] or frozenset()
        strangers = [user for user in value if user not in allowed]
        if strangers:
            raise ValueError(f"{strangers[0]} is not in DETACH_ALLOWED_USERS")
        return value

    @property
    def owners(self) -> tuple[int, ...]:
        """Who owns this machine's sessions (``/adopt``): DETACH_ADMINS, else the first allowed
        user as written (as given in code: the lowest id); the first of them is ``detach
        adopt``'s."""
        return self.admins or tuple(sorted(self.allowed_users))[:1]

    @field_validator("allowed_workdirs", "sandbox_deny_read", mode="before")
    @classmethod
    def _parse_dirs(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(Path(part.strip()) for part in value.split(",") if part.strip())
        return value

    @field_validator("projects", mode="before")
    @classmethod
    def _parse_projects(cls, value: object) -> object:
        if isinstance(value, str):
            pairs = []
            for part in (p.strip() for p in value.split(",")):
                if not part:
                    continue
                name, sep, path = part.partition("=")
                if not sep or not name.strip() or not path.strip():
                    raise ValueError(f"{part!r} is not name=path")
                pairs.append((name.strip(), Path(path.strip())))
            return tuple(pairs)
        return value

    @field_validator("owner_tools", mode="before")
    @classmethod
    def _parse_owner_tools(cls, value: object) -> object:
        """yes/true (a boolean before #58) mean ``all``; no/false mean ``no``."""
        if isinstance(value, bool):
            return OwnerTools.ALL if value else OwnerTools.NO
        if isinstance(value, str):
            said = value.strip().lower()
            return {"yes": "all", "true": "all", "false": "no"}.get(said, said)
        return value

    @field_validator("auto_allowed_tools", "sandbox_allowed_domains", mode="before")
    @classmethod
    def _parse_tools(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'detach.sqlite').resolve()}"

    @property
    def jobs_database_url(self) -> str | None:
        """The job engine's own, disposable store: in memory when the app is on SQLite (one
        process; queued turns are re-submitted from the app's tables at start), the shared
        database when it is on PostgreSQL (scale-out workers)."""
        url = self.resolved_database_url
        return None if url.startswith("sqlite") else url

    @property
    def base_engine(self) -> str:
        """The engine a task gets when nothing picks one (DETACH_DEFAULT_ENGINE=auto: Claude's,
        and the preflight may route a walk-away task down from there)."""
        return "claude" if self.default_engine == "auto" else self.default_engine

    @property
    def default_workdir(self) -> Path:
        return (self.workdir or Path.home()).resolve()

    def secret_values(self) -> list[str]:
        """Values that must never reach an agent's environment or a log line (with the
        password inside DETACH_DATABASE_URL, as written and percent-decoded, unless it is so
        short that hiding it would hide every variable holding those letters)."""
        secrets = [self.bot_token, self.stt_api_key, self.github_token, self.managed_api_key]
        values = [s.get_secret_value() for s in secrets if s is not None and s.get_secret_value()]
        password = urllib.parse.urlsplit(self.database_url or "").password
        if password and len(password) >= MIN_PASSWORD_CHARS:
            values += dict.fromkeys((password, urllib.parse.unquote(password)))
        return values


def _user_ids(value: str) -> list[int]:
    """Numeric Telegram user ids, comma-separated, in their order."""
    parts = [part for part in value.replace(" ", "").split(",") if part]
    for part in parts:
        if not part.lstrip("-").isdigit():
            raise ValueError(
                f"numeric Telegram user ids, comma-separated; {part[:40]!r} is not one "
                "(a @name cannot be allowed: `detach init` pairs you, or @userinfobot "
                "tells you your id)"
            )
    return [int(part) for part in parts]


def key_variables(settings: Settings, presets: Iterable[Preset]) -> tuple[str, ...]:
    """The variables holding a key whatever their names: every preset's ``api_key_env``,
    DETACH_LOCAL_API_KEY_ENV's and DETACH_STT_API_KEY."""
    named = [p.api_key_env for p in presets]
    named += [settings.local_api_key_env, "DETACH_STT_API_KEY"]
    return tuple(sorted({name for name in named if name}))


def known_secrets(
    settings: Settings, environ: Mapping[str, str], keys: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The values no stored or sent text holds: the bot's own (token, database password…)
    and those of ``environ`` named like a secret (``executors.denied.secret_names``) or in
    ``keys`` (``key_variables``)."""
    named = (environ[name] for name in secret_names(environ, keys))
    return (*settings.secret_values(), *(v for v in named if not v.startswith("/")))
