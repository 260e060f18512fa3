"""What a turn runs with (its TurnSpec: directory, session, tools allowed without asking, budget
left, MCP servers, process tag) and what refuses it before any agent starts (the daily cap, a
spent budget, a directory no longer allowed); a task's worktree merged or discarded is cut again
first (``bot.ports.TaskWorktrees``), whichever door the turn came in by."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bot.errors import UserInputError
from bot.models import (
    ApprovalMode,
    McpServerSpec,
    OwnerTools,
    Task,
    TaskStatus,
    Turn,
    TurnError,
    TurnSpec,
)
from bot.money.desk import MoneyDesk
from bot.money.presets import Preset
from bot.ports import TaskWorktrees
from bot.store import Store, TurnOutcome
from bot.turns.outcome import preamble
from bot.turns.preambles import read_preamble
from bot.workdirs import WorkdirPolicy
from executors.gitguard import GitGuard

SUBTASK_SERVER = "detach"  # the MCP server's name the agent sees: mcp__detach__start…
OWNER_TOOLS = ("notify", "ask_owner")  # ``bot.mcp.owner``: on every server of a task's agent


@dataclass(frozen=True, slots=True)
class TurnPolicy:
    """How turns run: the tools of ``auto`` mode, when a progress message appears (a turn
    shorter than ``progress_delay_s`` gets none) and how often it is edited, how many check
    rounds a task gets (a failing check sends its output back to the agent until then), and the
    hosts a sandboxed turn may reach without asking."""

    auto_allowed_tools: tuple[str, ...] = ()
    progress_interval_s: float = 3.0
    progress_delay_s: float = 5.0
    check_rounds: int = 2
    sandbox_domains: tuple[str, ...] = ()
    timezone: str = "UTC"  # for times said to a user who set no /tz
    limit_retry_s: float = 900.0  # a usage limit without a reset time: try again after this
    stall_s: float = 600.0  # an agent quiet this long: its turn gets one watchdog message
    limit_warn_percent: float = 80.0  # a plan's usage window past this: one warning
    # the command (and its environment) of `detach mcp`, given to the agent of a task with
    # ``subtasks=yes`` (with ``--parent <task id>``); empty: no sub-tasks here
    subtask_command: tuple[str, ...] = ()
    subtask_env: Mapping[str, str] = field(default_factory=dict)
    # called as a turn is given that server: starts the process's MCP zygote if it is not yet
    # (bot.mcp.launch.Zygote), so the servers of later turns start in milliseconds
    mcp_wanted: Callable[[], None] | None = None
    # DETACH_OWNER_TOOLS: the tasks outside a sub-task tree whose agent gets that server too,
    # with the owner tools alone (``--task <task id>``: notify, ask_owner)
    owner_tools: OwnerTools = OwnerTools.NO
    # the bot's own directory (0700, in the data directory): a turn's files no agent may read,
    # such as the `--mcp-config` naming that server (bot.mcp.launch)
    private_dir: Path | None = None
    agent_nice: int = 0  # how much nicer than the bot a turn's processes run
    preamble: Path | None = None  # DETACH_PREAMBLE_FILE (a preset's own wins)
    # what a sandboxed turn may not read (executors/denied.py, wired by the composition root),
    # asked for every turn; None: nothing is denied
    read_denial: Callable[[], tuple[Path, ...]] | None = None
    git: GitGuard = field(default_factory=GitGuard)  # the bot's own git, confined
    # values no baseline records (the bot's token, the environment's API keys): the store
    # redacts them from what it stores and sends (bot.redaction)
    secrets: tuple[str, ...] = ()
    # variables no sandboxed command gets whatever their names (every preset's api_key_env)
    secret_names: tuple[str, ...] = ()


class TurnSpecs:
    """Builds each run's TurnSpec; ``process_tag``: this process's prefix of the tag every
    agent process carries (``<prefix>:<turn id>.<run>``); ``worktrees``: cuts a task's merged
    or discarded worktree again before its turn (None: nobody does)."""

    def __init__(
        self,
        store: Store,
        money: MoneyDesk,
        policy: TurnPolicy,
        workdirs: WorkdirPolicy | None,
        process_tag: str | None,
        *,
        worktrees: TaskWorktrees | None = None,
    ) -> None:
        self._store = store
        self._money = money
        self._policy = policy
        self._workdirs = workdirs
        self._process_tag = process_tag
        self._worktrees = worktrees
        self._runs = itertools.count(1)

    async def spec(
        self, task: Task, turn: Turn, preset: Preset | None, left: float | None
    ) -> TurnSpec:
        chosen = (preset.preamble if preset else None) or self._policy.preamble
        owner = await read_preamble(chosen)
        if owner is not None:
            await self._store.transcript.append(task.id, turn.id, [owner.entry()])
        return TurnSpec(
            task_id=task.id,
            turn_id=turn.id,
            prompt=turn.prompt,
            cwd=Path(task.cwd),
            model=task.model,
            resume_session_id=task.session_id,
            append_system_prompt=preamble(
                task, owner.text if owner else None, self.owner_tools(task)
            ),
            allowed_tools=await self._allowed_tools(task),
            approval_mode=task.approval_mode,
            extra_args=preset.args if preset else (),
            max_budget_usd=left,  # engines that take a budget enforce it themselves
            # one tag per run of the turn: the sweep after a run (in the background) must not
            # find the next run of the same turn (a handover runs it again at once)
            process_tag=f"{self._process_tag}:{turn.id}.{next(self._runs)}"
            if self._process_tag
            else None,
            sandbox_domains=self._policy.sandbox_domains,
            preset=preset,
            mcp_servers=self._subtask_server(task),
            private_dir=self._policy.private_dir,
            nice=self._policy.agent_nice,
            deny_read=self._deny_read(task),
            secret_names=self._policy.secret_names,
        )

    def _deny_read(self, task: Task) -> tuple[Path, ...]:
        """The paths a sandboxed or read-only turn (whose commands run without asking) may not
        read, listed afresh (an agent's home changes)."""
        denial = self._policy.read_denial
        if denial is None or task.approval_mode not in (
            ApprovalMode.SANDBOX,
            ApprovalMode.READONLY,
        ):
            return ()
        return denial()

    def _subtask_server(self, task: Task) -> tuple[McpServerSpec, ...]:
        """`detach mcp --parent <task>` for a task whose agent may start sub-tasks, or is one
        (it reports to its parent and messages its siblings there), else `detach mcp --task
        <task>` (the owner tools) when the task gets those."""
        command = self._policy.subtask_command
        if not self.owner_tools(task):  # every server of a task's agent has them
            return ()
        if self._policy.mcp_wanted is not None:
            self._policy.mcp_wanted()
        scope = "--parent" if _in_tree(task) else "--task"
        args = (*command[1:], scope, str(task.id))
        return (McpServerSpec(SUBTASK_SERVER, command[0], args, self._policy.subtask_env),)

    def owner_tools(self, task: Task) -> tuple[str, ...]:
        """The owner tools this task's agent has (its preamble names them): a task in a
        sub-task tree always, another as DETACH_OWNER_TOOLS says; none without `detach mcp`."""
        served = self._policy.subtask_command and (
            _in_tree(task) or self._policy.owner_tools.serves(task.kind)
        )
        return OWNER_TOOLS if served else ()

    async def refusal(self, task: Task, created: bool = False) -> TurnOutcome | None:
        """Work that must not start: over the daily cap (turns queued from the shell or before
        the cap was reached), a task whose budget is already spent, or whose directory is not
        there (allowed no longer, or a worktree that cannot be cut again). ``created``: the
        first turn of a task created a moment ago in this process, whose worktree (if any)
        was just cut and is not merged or discarded (its card, which offers that, comes
        after this turn): not looked up again (a store read before the agent's spawn)."""
        over = await self._money.over_daily_cap(task.owner_id)
        if over is not None:
            return TurnOutcome(
                TaskStatus.FAILED, error=TurnError("money.daily_cap_turn", dict(over[1]))
            )
        left = self._money.budget_left(task)
        if left is not None and left <= 0:
            return TurnOutcome(
                TaskStatus.BUDGET_EXCEEDED, error=TurnError("turn_error.budget_spent")
            )
        try:
            if self._worktrees is not None and not created:
                await self._worktrees.reopen(task)  # merged or discarded: cut again, same path
            if self._workdirs is not None:
                self._workdirs.check(Path(task.cwd))  # the allow-list may have changed since
        except UserInputError as exc:
            return TurnOutcome(TaskStatus.FAILED, error=TurnError(exc.key, exc.params))
        return None

    async def _allowed_tools(self, task: Task) -> tuple[str, ...]:
        """Remembered grants of the owner for this engine and directory; in auto mode also the
        tools from settings; in readonly mode only its Detach server's."""
        # its own sub-tasks (each capped by its rights, read-only ones too) and its owner:
        # nothing to ask
        tree = _in_tree(task) and self._policy.subtask_command
        own: tuple[str, ...] = (f"mcp__{SUBTASK_SERVER}",) if tree else ()
        own = own or tuple(f"mcp__{SUBTASK_SERVER}__{name}" for name in self.owner_tools(task))
        if task.approval_mode is ApprovalMode.READONLY:
            return own
        grants = await self._store.grants.active(task.owner_id, task.engine, task.cwd)
        tools = tuple(g.pattern for g in grants) + own
        if task.approval_mode is ApprovalMode.AUTO:
            tools = self._policy.auto_allowed_tools + tools
        return tools


def _in_tree(task: Task) -> bool:
    """A task with sub-tasks (``subtasks=yes``, or above DETACH_SUBTASK_DEPTH), or one."""
    return task.subtasks or task.parent_id is not None
