"""Plain records passed between layers: states, tasks, turns and the engine-neutral agent events."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path

from bot.events import Usage


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    BUDGET_EXCEEDED = "budget_exceeded"
    INTERRUPTED = "interrupted"
    CHECK_FAILED = "check_failed"  # the agent finished but its check still fails
    WAITING_FOR_LIMIT = "waiting_for_limit"  # its engine's usage limit: it goes on at the reset
    ARCHIVED = "archived"

    @property
    def active(self) -> bool:
        """Queued or running: not finished (the one meaning of "active" for a task)."""
        return self in ACTIVE_STATUSES


ACTIVE_STATUSES = frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING, TaskStatus.WAITING_FOR_LIMIT})
TurnStatus = TaskStatus  # a turn moves through the same states as its task


# An engine's name ("claude", "codex"), as its registry entry declares it (executors/registry.py);
# the same word is its Telegram command.
Engine = str


class QuestionStatus(StrEnum):
    PENDING = "pending"  # somebody may still answer it
    ANSWERED = "answered"
    EXPIRED = "expired"  # its deadline passed, its turn ended, or the process restarted


class QuestionKind(StrEnum):
    """What a pending question asks (``pending_questions.kind``)."""

    APPROVAL = "approval"  # may a tool run (or a repository's check): ApprovalAnswer
    QUESTION = "question"  # an agent's question: the answer is the picked options' text
    BUDGET = "budget"  # a spent budget: extend or stop, asked on the turn's card


class CopyOf(StrEnum):
    """What a copy /pending showed copies (``pending_copies.of``)."""

    QUESTION = "question"  # a pending question: an approval, an agent's question, a budget
    HOLD = "hold"  # a preflight's hold: a task over its budget before it starts


class ApprovalAnswer(StrEnum):
    """The one vocabulary of an approval's outcome: what the desk returns to the turn, what
    ``pending_questions.answer`` and the audit log keep. Only the owner gives the first three;
    the desk closes an unanswered question with the last four. The buttons have a vocabulary of
    their own (``bot.approvals.view.ApprovalChoice``): a tap on "Always" is not an answer yet
    (it asks to confirm), "Confirm" answers ``ALWAYS``, "Back" answers nothing; so a button is
    not an answer, and neither set can stand for the other."""

    ALLOW = "allow"  # this once
    DENY = "deny"
    ALWAYS = "always"  # allowed, and remembered as a grant
    TIMEOUT = "timeout"  # nobody answered in time
    ENDED = "ended"  # the turn ended (a cancel, a shutdown) before an answer
    RESTART = "restart"  # the process that asked died (a restart, a dead worker's turns)
    SUPERSEDED = "superseded"  # a newer question of the same task asks it again (the budget)


class FollowUpDoor(StrEnum):
    """Where a follow-up came from (its acknowledgement says so, ``about.door``); each goes
    through the one follow-up use case (``bot.tasks.followup``)."""

    CHAT = "chat"  # a reply, or a message in the task's topic
    VOICE = "voice"  # a voice draft's Start in the task's topic
    BOARD = "board"  # the board, or its Mini App
    MCP = "mcp"  # an MCP client (`detach mcp`)


class MessageKind(StrEnum):
    """What a task's message is (``outbox.link_kind``): whether it buzzes (``/notify``), and
    which of a task's messages a later one replaces or edits."""

    ACK = "ack"  # "queued": the answer to the message that started a task
    STATUS = "status"
    PROGRESS = "progress"  # the live progress message of a running turn
    RESULT = "result"  # the turn's card
    APPROVAL = "approval"  # an approval or an agent's question
    QUESTION = "question"
    BUDGET = "budget"
    FOLLOWUP = "followup"
    LIMIT = "limit"  # an engine's usage limit: the task waits for its reset
    CANCEL = "cancel"  # the "cancelling…" answer to /cancel, until the turn's card takes it
    DOCUMENT = "document"
    INTERRUPTED = "interrupted"
    MESSAGE = "message"  # a delivered message of no kind given
    # the owner's own messages linked to a task (``message_links.kind``)
    COMMAND = "command"  # the command that started it
    FOLLOW_UP = "follow_up"  # a reply that followed it up


class OutboxOp(StrEnum):
    """What an outbox row does in Telegram (``outbox.op``)."""

    SEND = "send"
    DOCUMENT = "document"
    EDIT = "edit"  # a message's text (and buttons)
    MARKUP = "markup"  # only its buttons
    DELETE = "delete"
    CLOSE_TOPIC = "close_topic"  # the task's forum topic: closed (a group) or marked (private)


class TopicMode(StrEnum):
    """Where a forum chat's task messages go (``DETACH_TOPICS``)."""

    TASK = "task"  # a topic per task
    PROJECT = "project"  # a topic per working directory
    OFF = "off"  # the chat itself, as without topics


class OutboxStatus(StrEnum):
    PENDING = "pending"  # to be delivered (maybe waiting to retry)
    SENT = "sent"
    FAILED = "failed"  # undeliverable (the user blocked the bot, Telegram refused it)
    SUPERSEDED = "superseded"  # a newer edit replaced it, or its moment passed before it went


class WorktreeState(StrEnum):
    ACTIVE = "active"
    MERGED = "merged"
    DISCARDED = "discarded"


class ScheduleState(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    DONE = "done"  # a one-off (/at) that ran
    DELETED = "deleted"


class ProcessRole(StrEnum):
    """What a process does: ``all`` (the bot, running turns too), ``front`` (the bot; turns run
    on workers), ``worker`` (a scale-out worker: turns and schedule runs, no Telegram)."""

    ALL = "all"
    FRONT = "front"
    WORKER = "worker"


class ApprovalMode(StrEnum):
    ASK = "ask"  # tool calls that need permission become buttons
    AUTO = "auto"  # no prompts: the allowed tools come from settings
    READONLY = "readonly"  # everything that needs permission is denied
    SANDBOX = "sandbox"  # free inside an OS sandbox (the task's directory); crossing it asks


class NotifyPolicy(StrEnum):
    """Which of a chat's task messages make the phone buzz (``/notify``)."""

    ALL = "all"  # every message
    DONE = "done"  # what needs the person: approvals, questions, the final card (the default)
    QUIET = "quiet"  # none


class PreflightDecision(StrEnum):
    """What a preflight says of a walk-away task before it starts (``bot.preflight``)."""

    GO = "go"  # clear and sane: start it
    ASK = "ask"  # one question for the owner first
    REFUSE = "refuse"  # destructive or impossible as stated: not started unless told to


class WaitState(StrEnum):
    """What a task waits for, on its owner or its engine (or a command its preflight holds
    before it is a task): one name on the acknowledgement, /tasks, /pending and the board
    (``wait.<value>`` in the catalogs)."""

    APPROVAL = "approval"  # a tool call waits for Allow or Deny
    QUESTION = "question"  # the agent asked its owner
    CONSENT = "consent"  # a repository's check waits for the owner's consent to run
    BUDGET = "budget"  # its budget is spent: extend or stop
    PREFLIGHT = "preflight"  # held by its preflight before it starts: Start anyway or Drop
    USAGE_LIMIT = "usage_limit"  # its engine's usage limit: it goes on at the reset
    TERMINAL = "terminal"  # held at the terminal until taken back

    @classmethod
    def asked(cls, kind: str, check: bool) -> WaitState:
        """The wait of a pending question of ``kind`` (``check``: it asks for a check)."""
        if kind == QuestionKind.BUDGET:
            return cls.BUDGET
        if kind == QuestionKind.QUESTION:
            return cls.QUESTION
        return cls.CONSENT if check else cls.APPROVAL


def waiting_for(status: TaskStatus, asked: WaitState | None, at_terminal: bool) -> WaitState | None:
    """What a task in ``status`` waits for, given its oldest pending question's wait and
    whether it is held at the terminal; None: nothing (it runs, is queued, or is over). A
    budget question waits only while the task is parked at its budget."""
    if at_terminal:
        return WaitState.TERMINAL
    if asked is WaitState.BUDGET and status is not TaskStatus.BUDGET_EXCEEDED:
        asked = None
    if asked is not None:
        return asked
    return WaitState.USAGE_LIMIT if status is TaskStatus.WAITING_FOR_LIMIT else None


class TaskKind(StrEnum):
    DETACH = "detach"  # self-contained goal, no interaction
    SESSION = "session"  # an interactive agent session (/claude)


class OwnerTools(StrEnum):
    """Which tasks' agents get ``notify`` and ``ask_owner`` (``DETACH_OWNER_TOOLS``); a
    ``subtasks=yes`` task has them whatever this says, on the server it has anyway."""

    WALKAWAY = "walkaway"  # /detach tasks (nobody watches them) and sub-task trees: the default
    ALL = "all"  # every task (its MCP server delays each turn's start, and it is never warm)
    NO = "no"  # only sub-task trees

    def serves(self, kind: TaskKind) -> bool:
        """Whether a task of ``kind`` outside any sub-task tree gets them."""
        return self is OwnerTools.ALL or (self is OwnerTools.WALKAWAY and kind is TaskKind.DETACH)


@dataclass(frozen=True, slots=True)
class Task:
    id: int
    owner_id: int
    chat_id: int
    engine: Engine
    kind: TaskKind
    slug: str
    title: str
    cwd: str
    model: str | None
    status: TaskStatus
    session_id: str | None
    locale: str
    created_at: datetime
    updated_at: datetime
    announced: bool
    total_cost_usd: float = 0.0
    approval_mode: ApprovalMode = ApprovalMode.ASK
    preset: str | None = None
    max_usd: float | None = None
    check: str | None = None  # the command that proves the work (``check=``), run after a turn
    # the repository whose .detach.toml named the check (it runs once the owner approved it);
    # None: the owner typed it
    check_repository: str | None = None
    parent_id: int | None = None  # the task whose agent started this one (`detach mcp`)
    subtasks: bool = False  # its agent may start sub-tasks (``subtasks=yes``)
    host: str | None = None  # pinned to this host (``host=``, /host); None: any that fits
    session_host: str | None = None  # where its agent's session lives: follow-ups go there
    project: str | None = None  # ``cwd=project:x``: each host runs it in its own directory

    @property
    def label(self) -> str:
        return f"#{self.id} {self.slug}"


@dataclass(frozen=True, slots=True)
class Turn:
    id: int
    task_id: int
    seq: int
    prompt: str
    status: TaskStatus
    result_text: str | None
    error: TurnError | None
    stderr_tail: str | None
    cost_usd: float | None
    input_tokens: int | None
    output_tokens: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    check_round: int = 1  # 2 and up: a turn the failed check asked for
    parked_at: datetime | None = None  # when it first waited for its engine's usage limit
    limit_parks: int = 0  # how many times a usage limit sent it back to the queue
    runner: str | None = None  # the process that runs (or ran) it
    host: str | None = None  # the host that ran it last (scale-out; None in one process)
    model: str | None = None  # the model its tokens were priced as (as the engine named it)
    unpriced: bool = False  # no price known for it: its cost is what the caps counted

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def waited_s(self) -> float | None:
        """How long it waited for its engine's usage limit before it last started."""
        if self.parked_at is None or self.started_at is None:
            return None
        return max(0.0, (self.started_at - self.parked_at).total_seconds())


@dataclass(frozen=True, slots=True)
class Phrase:
    """A text not yet in any language, for whoever shows it to say in the reader's
    (``Texts.say``): a catalog key and its params; a param may be a Phrase itself or a tuple
    of them (said in the same language, joined by commas). ``count``: the plural form's n."""

    key: str
    params: Mapping[str, object] = field(default_factory=dict)
    count: int | None = None

    def encode(self) -> dict[str, object]:
        """The phrase as JSON data, for another process to say (``decode``); a param JSON
        has no type for is kept as its text."""
        params = {k: _encoded(v) for k, v in self.params.items()}
        return {"key": self.key, "params": params, "count": self.count}

    @classmethod
    def decode(cls, data: Mapping[str, object]) -> Phrase:
        """What ``encode`` wrote; malformed data raises KeyError, TypeError or ValueError."""
        params = data.get("params") or {}
        if not isinstance(params, Mapping):
            raise TypeError("a phrase's params are a mapping")
        count = data.get("count")
        return cls(
            str(data["key"]),
            {str(k): _decoded(v) for k, v in params.items()},
            None if count is None else int(str(count)),
        )


def _encoded(value: object) -> object:
    if isinstance(value, Phrase):
        return value.encode()
    if isinstance(value, tuple | list):
        return [_encoded(v) for v in value]
    return value if value is None or isinstance(value, str | int | float) else str(value)


def _decoded(value: object) -> object:
    if isinstance(value, Mapping):
        return Phrase.decode(value)
    if isinstance(value, list):
        return tuple(_decoded(v) for v in value)
    return value


@dataclass(frozen=True, slots=True)
class TurnError:
    """Why a turn did not succeed, stored as a message key and its parameters and localised
    when shown (``turn_error.*`` in the catalogs, or the key of the refusal that stopped it)."""

    key: str
    params: dict[str, str | int | float] = field(default_factory=dict)

    def encode(self) -> str:
        return json.dumps({"key": self.key, "params": self.params}, ensure_ascii=False)

    @classmethod
    def decode(cls, stored: str | None) -> TurnError | None:
        """A stored error; plain text (rows written before errors had keys) is kept as text."""
        if not stored:
            return None
        try:
            data = json.loads(stored)
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("key"), str):
            return cls(data["key"], dict(data.get("params") or {}))
        return cls("turn_error.text", {"text": stored})


@dataclass(frozen=True, slots=True)
class RepoHead:
    """A git repository's top, its current commit, and its branch (None when detached)."""

    top: Path
    commit: str
    branch: str | None


@dataclass(frozen=True, slots=True)
class NewTask:
    """What a handler or the shell asks for; the service turns it into a Task and its first Turn."""

    owner_id: int
    chat_id: int
    engine: Engine
    kind: TaskKind
    prompt: str
    cwd: Path
    locale: str = "en"
    model: str | None = None
    announced: bool = True
    approval_mode: ApprovalMode = ApprovalMode.ASK
    preset: str | None = None
    max_usd: float | None = None
    worktree: bool = False  # run in its own git worktree on its own branch
    head: RepoHead | None = None  # where the worktree is cut from, as the planner just found it
    slug: str | None = None  # from a task file; else made from the prompt
    origin: str | None = None  # shown on the acknowledgement: the schedule or file it came from
    check: str | None = None  # ``check=``, ``check:``, ``--check`` or the repository's .detach.toml
    check_repository: str | None = None  # the repository's (not the owner's): asks consent
    note: str | None = None  # one line for the acknowledgement (why the sandbox is not used)
    subtasks: bool = False  # ``subtasks=yes``: its agent gets `detach mcp` to start sub-tasks
    parent_id: int | None = None  # started by this task's agent
    title: str | None = None  # what the chat shows as its goal (the user's words, the files'
    # names), where the prompt says more (where the attachments are); None: the prompt
    spent_usd: float = 0.0  # spent before its first turn (its preflight): counts to max_usd
    host: str | None = None  # ``host=`` or the chat's /host: runs on that host only
    project: str | None = None  # ``cwd=project:x``: resolved on the host that claims it
    host_offline: bool = False  # pinned to a host that is offline: Run elsewhere is offered


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """An MCP server (stdio) an agent is given for a turn: `detach mcp` for sub-tasks."""

    name: str
    command: str
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TurnSpec:
    """Everything an executor needs to run one turn."""

    task_id: int
    turn_id: int
    prompt: str
    cwd: Path
    model: str | None = None
    resume_session_id: str | None = None
    append_system_prompt: str | None = None
    allowed_tools: tuple[str, ...] = ()
    approval_mode: ApprovalMode = ApprovalMode.ASK
    extra_args: tuple[str, ...] = ()
    max_budget_usd: float | None = None
    process_tag: str | None = None  # carried by every process of the turn (executors.process)
    sandbox_domains: tuple[str, ...] = ()  # hosts a sandboxed turn may reach without asking
    preset: Preset | None = None  # the task's model preset (an endpoint engine's endpoint)
    mcp_servers: tuple[McpServerSpec, ...] = ()  # for engines whose spec says mcp_client
    private_dir: Path | None = None  # the bot's own (0700): where a turn's config files go
    nice: int = 0  # the turn's processes run this much nicer (lower CPU priority) than the bot
    # what a sandboxed turn's commands, tools and checks may not read (executors/denied.py)
    deny_read: tuple[Path, ...] = ()
    # variables its commands never get, whatever their names (every preset's api_key_env):
    # with the key-like names of executors.denied.secret_names
    secret_names: tuple[str, ...] = ()
    # what the CLI's own git gets, read with the turn's baseline (None: the executor reads it)
    git_env: tuple[tuple[str, str], ...] | None = None


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One run of a task's check after a turn: passed or not, its output (capped), how long."""

    command: str
    passed: bool
    exit_code: int | None  # None: it did not finish (timed out)
    output: str
    duration_s: float
    round: int
    timed_out: bool = False
    approved: bool = True  # False: not run, the owner did not approve the repository's check

    def tail(self, chars: int = 1500) -> str:
        return self.output[-chars:]


@dataclass(frozen=True, slots=True)
class Preset:
    """A named model: engine, model string, extra CLI arguments, USD per million tokens; for
    engines that talk to an OpenAI-compatible endpoint themselves (``local``) also where it is,
    the environment variable holding its key, and its context window in tokens. ``priced``:
    its prices are known (a preset in DETACH_CONFIG that names none is not: its tokens are
    counted as unpriced, ``bot.money.pricing``; one that says 0 is free)."""

    name: str
    engine: Engine
    model: str
    args: tuple[str, ...] = ()
    price_input: float = 0.0
    price_output: float = 0.0
    price_cache_read: float = 0.0
    price_cache_write: float = 0.0
    base_url: str | None = None
    api_key_env: str | None = None
    context_window: int | None = None
    priced: bool = True
    preamble: Path | None = None  # its capabilities preamble (over DETACH_PREAMBLE_FILE)

    def cost_usd(self, usage: Usage) -> float:
        return (
            usage.input_tokens * self.price_input
            + usage.output_tokens * self.price_output
            + usage.cache_read_tokens * self.price_cache_read
            + usage.cache_write_tokens * self.price_cache_write
        ) / 1_000_000


@dataclass(frozen=True, slots=True)
class SpendLine:
    """What one engine's turns of one model used in a period: tokens, and what they cost (for
    an ``unpriced`` model: what the caps counted, ``bot.money.pricing``)."""

    engine: Engine
    model: str | None
    unpriced: bool
    input_tokens: int
    output_tokens: int
    cost_usd: float
