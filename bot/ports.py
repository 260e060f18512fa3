"""The Protocols the core depends on, and how an engine declares itself; adapters live in
executors/ (one module per engine, listed in executors/registry.py) and bot/notifier.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from bot.events import AgentEvent, ApprovalDecision, ApprovalRequest, Steer
from bot.models import ApprovalMode, CheckResult, McpServerSpec, Phrase, Preset, Task, TurnSpec

NO_LOGIN = "probe.no_login"  # an engine's probe line when it has no way to its model


class Approver(Protocol):
    """Answers an agent's permission requests for one turn; every path but Allow is a deny."""

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision: ...


class SteerInbox(Protocol):
    """Messages the owner sends into one running turn. The executor takes each at most once and
    says what became of it: ``SteerTaken`` once the agent has it in this turn, else (the turn
    ended first) ``SteerDeferred``; one it never took is deferred by the bot at the turn's end."""

    def take(self) -> list[Steer]:
        """The messages waiting, oldest first; they are the executor's from now."""
        ...

    async def arrived(self) -> None:
        """Returns once a message waits (at once when one does)."""
        ...


class NoSteering:
    """The inbox of a turn nobody can steer: nothing ever arrives."""

    def take(self) -> list[Steer]:
        return []

    async def arrived(self) -> None:
        await asyncio.Event().wait()


NO_STEERING = NoSteering()

Ready = Callable[[], Awaitable[None]]
# a turn's MCP server started ahead of its agent: the server, the CLI's environment, its directory
McpAhead = Callable[[McpServerSpec, Mapping[str, str], Path], None]


async def _now() -> None:
    return None


NOW: Ready = _now  # a turn whose agent may have its prompt as soon as it is started


class Executor(Protocol):
    """One agent engine: runs one turn and yields engine-neutral events.

    The stream ends with exactly one ``TurnFinished``, or raises ``AgentCrashed`` when the agent
    ended without a verdict. Closing the iterator early (cancel, timeout) stops the agent and
    every process it started before the close returns.
    """

    engine: str

    def run(
        self,
        spec: TurnSpec,
        approver: Approver,
        steering: SteerInbox = NO_STEERING,
        ready: Ready = NOW,
    ) -> AsyncGenerator[AgentEvent, None]:
        """``steering``: messages for the running turn (an engine that cannot take them in
        leaves them there: the bot runs each as its own next turn). ``ready`` is awaited
        before the agent gets its prompt (the turn's first transcript lines are written while
        its process starts; the repository was read before it was spawned); if it raises,
        the agent is stopped and the error is the turn's."""
        ...

    async def probe(self) -> Phrase:
        """A status line for /status (version, and anything the engine checks at start); raises
        ``AgentNotInstalled`` when the engine cannot run here."""
        ...

    def sandbox_problem(self) -> Phrase | None:
        """Why ``mode=sandbox`` cannot run on this machine (known after ``probe``), or None."""
        ...


class SessionStore(Protocol):
    """Conversations an engine keeps itself (one without a CLI that stores its sessions), in
    the app's database: a reply resumes one after any restart."""

    async def load(self, session_id: str) -> list[dict[str, Any]] | None: ...

    async def save(self, session_id: str, engine: str, messages: list[dict[str, Any]]) -> None: ...


class CheckRunner(Protocol):
    """Runs a task's check command in its directory, confined to it by the sandbox whenever
    this machine has one (``sandboxed``: even when the probe says it has not), bounded in time;
    a cancel stops it and everything it started."""

    async def run(
        self, command: str, cwd: Path, sandboxed: bool, round_: int, tag: str | None = None
    ) -> CheckResult: ...


class LostRunners(Protocol):
    """On a shared database, whether the runner of a task's running turn is gone. The
    composition root wires ``bot.fleet.takeover.Takeover`` here: the takeover expires questions
    through the approval desk, so the approval answers may not import the fleet back."""

    async def if_lost(self, task_id: int) -> bool:
        """True when that runner's lease lapsed and its turns were taken over just now (the
        task is offered for Resume); False while it lives, or when no turn runs."""
        ...


@dataclass(frozen=True, slots=True)
class TreeState:
    """A work tree as a turn's end found it: its top, its commit (None before the first) and
    whether any file differs from that commit or is new (``bot.turns.baseline.glance``)."""

    top: str
    head: str | None
    dirty: bool


class TaskWorktrees(Protocol):
    """What a turn needs of its task's own worktree; the composition root wires
    ``bot.worktrees.revival.Revival`` here (it tells the chat, a floor above the turns)."""

    async def reopen(self, task: Task) -> None:
        """A merged or discarded worktree cut again at its own path (nothing for any other
        task); ``UserInputError`` when it cannot be."""
        ...

    async def offers(
        self, task_id: int, seen: Callable[[], Awaitable[TreeState | None]] | None = None
    ) -> bool:
        """Whether Merge and Discard apply: an active worktree holding work. ``seen``: the
        work tree's state as the turn's card reads it anyway (asked only for an active one)."""
        ...


class EngineSettings(BaseModel):
    """An engine's own settings, declared once, in its module: a subclass whose fields are
    named ``<engine>_<setting>``, with their defaults and bounds. ``bot.settings.Settings``
    inherits every registered engine's, so ``DETACH_<ENGINE>_<SETTING>`` (or the settings
    file) sets them and a mistake is reported like any other setting's; a ``<engine>_bin``
    field is the engine's binary."""

    model_config = ConfigDict(extra="ignore")


S = TypeVar("S", bound=EngineSettings)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """What the composition root hands an engine's factory."""

    binary: str | None  # DETACH_<NAME>_BIN, else the default binary on PATH
    environ: Mapping[str, str]  # the environment agents inherit (secrets removed by the engine)
    secrets: Sequence[str] = ()
    cancel_grace_s: float = 5.0
    settings: EngineSettings = field(default_factory=EngineSettings)  # DETACH_<NAME>_*
    sessions: SessionStore | None = None
    # the engine's model presets (built-in, then DETACH_CONFIG's in its order): an endpoint
    # engine (``local``) may be configured by its presets alone
    presets: tuple[Preset, ...] = ()
    # the pool of warm agents (``executors.warm.WarmPool``, DETACH_WARM_AGENTS) for an engine
    # that keeps one; None: every turn starts cold
    warm: object | None = None
    # starts a turn's MCP server ahead of its agent's CLI, given the server, the environment
    # the CLI starts it in and the directory (bot.mcp.launch.Zygote.ahead); None: it starts
    # when the CLI starts it
    mcp_ahead: McpAhead | None = None
    # an agent's process chain started ahead of its spawn (``executors.ahead.SpawnAhead``,
    # DETACH_SPAWN_AHEAD); None: every agent's chain starts at its spawn
    spawn_ahead: object | None = None

    def settings_of(self, kind: type[S]) -> S:
        """The engine's settings as its own class (its defaults when none were given)."""
        return kind.model_validate(self.settings, from_attributes=True)


class Isolation(IntEnum):
    """How strongly an engine holds a task of one mode, weakest first; routing never moves a
    task to a weaker one (``executors.registry.may_move``; the reasons: docs/security.md)."""

    OWNER_RIGHTS = 0  # it acts with the owner's rights, unasked (auto)
    TAPS = 1  # each command and edit waits for the owner's tap; reads are free (ask)
    RULES = 2  # the agent's own rules refuse writes and commands, no OS sandbox (readonly)
    SANDBOX_NETWORK = 3  # commands in an OS sandbox that reaches allow-listed hosts; file tools
    # held by the CLI's rules
    SANDBOX = 4  # commands in an OS sandbox without network; file tools confined in-process
    SANDBOX_ALL = 5  # every command and file access in an OS sandbox without network


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """An engine's declaration: its name (also its Telegram command and ``engine=`` value), the
    binary looked up on PATH, the CLI version it was measured with, its built-in model
    presets, the factory of its Executor and the class of its settings."""

    name: str
    default_binary: str
    pinned_version: str
    presets: tuple[Preset, ...]
    make: Callable[[EngineConfig], Executor]
    mcp_client: bool = False  # its agent can be given MCP servers (TurnSpec.mcp_servers)
    # how a person continues one of its sessions at a terminal: this argv, then the session id
    # (``claude --resume <id>``); empty: it has no terminal CLI (``/local``)
    terminal_resume: tuple[str, ...] = ()
    settings: type[EngineSettings] = EngineSettings  # a base of bot.settings.Settings
    # how strongly it holds a task of each mode; a mode it does not name: never routed to
    isolation: Mapping[ApprovalMode, Isolation] = field(default_factory=dict)
    # a catalog key the task's acknowledgement adds (where its work runs), or none
    ack_note: str = ""
