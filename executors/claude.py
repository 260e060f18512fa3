"""Claude Code CLI engine: headless ``-p`` turns in stream-json, normalised into AgentEvents."""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import shutil
import uuid
from collections.abc import AsyncGenerator, Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from bot.errors import AgentCrashed, AgentNotInstalled, SessionNotFound
from bot.events import AgentEvent, TurnFinished
from bot.models import ApprovalMode, Phrase, Preset, TurnSpec
from bot.ports import (
    NO_LOGIN,
    NO_STEERING,
    NOW,
    Approver,
    EngineConfig,
    EngineSettings,
    EngineSpec,
    Isolation,
    McpAhead,
    Ready,
    SteerInbox,
)
from executors import gitguard, sandbox
from executors.ahead import SpawnAhead
from executors.claude_channel import ClaudeChannel
from executors.claude_protocol import json_object, parse_event
from executors.claude_sandbox import mcp_config_file, sandbox_settings
from executors.claude_steer import replayed_text, user_line
from executors.gitscope import under
from executors.process import (
    AgentProcess,
    agent_env,
    agent_process,
    created,
    read_lines,
    version_line,
)
from executors.shield import shielded
from executors.tree import wait_exit
from executors.warm import WarmPool, WarmStart
from executors.warm_key import WarmKey, claude_files, warm_key, warm_template

log = logging.getLogger(__name__)

PINNED_VERSION = "2.1.197"
_VERSION_RE = re.compile(r"(\d+\.\d+\.\d+)")


class ClaudeExecutor:
    """Runs ``claude -p`` with stream-json in and out. The prompt goes in as a JSON message on
    stdin (it can never be read as a flag); in ``ask`` mode permission requests come back as
    control requests on stdout (``--permission-prompt-tool stdio``) and are answered on stdin."""

    engine = "claude"

    def __init__(
        self,
        binary: str | None,
        env: Mapping[str, str],
        secrets: Iterable[str] = (),
        cancel_grace_s: float = 5.0,
        *,
        project_settings: bool = False,
        warm: WarmPool | None = None,
        mcp_ahead: McpAhead | None = None,
        ahead: SpawnAhead | None = None,
    ) -> None:
        """``warm``: a pool of warm agents (DETACH_WARM_AGENTS), else every turn starts cold;
        ``mcp_ahead``: starts a turn's MCP servers as its CLI is spawned; ``ahead``: its
        process chain started ahead (both ``EngineConfig``)."""
        self._binary = binary
        self._env = agent_env(env, secrets)
        self._grace_s = cancel_grace_s
        self._project_settings = project_settings
        self._warm = warm
        self._mcp_ahead = mcp_ahead
        self._ahead = ahead
        self._template: TurnSpec | None = None  # the last new task's start, task-neutral

    def argv(self, spec: TurnSpec, mcp_config: Path | None = None) -> list[str]:
        """The CLI's command line; ``mcp_config``: the file naming the turn's MCP servers."""
        binary = shutil.which(self._binary) if self._binary else None
        if binary is None:
            raise AgentNotInstalled(self.engine, self._binary)
        argv = [
            binary,
            "-p",
            "--input-format",
            "stream-json",
            "--output-format",
            "stream-json",
            "--verbose",
            "--replay-user-messages",  # a steer's echo: the moment the CLI takes it in
            # only the bot's MCP servers: never the working directory's ``.mcp.json``
            "--strict-mcp-config",
            *self._setting_sources(),
        ]
        if spec.approval_mode in (ApprovalMode.ASK, ApprovalMode.SANDBOX):
            argv += ["--permission-prompt-tool", "stdio"]
        if spec.approval_mode is ApprovalMode.SANDBOX:
            # the MCP servers' file may hold a database password: not for the agent's commands
            hidden = (mcp_config,) if mcp_config is not None else ()
            settings = sandbox_settings(
                replace(spec, deny_read=(*spec.deny_read, *hidden)), self._env
            )
            argv += ["--permission-mode", "acceptEdits", "--settings", settings]
        if spec.model:
            argv += ["--model", spec.model]
        if spec.resume_session_id:
            argv.append(f"--resume={_session_uuid(spec.resume_session_id)}")
        if spec.append_system_prompt:
            argv += ["--append-system-prompt", spec.append_system_prompt]
        if spec.allowed_tools:
            argv += ["--allowedTools", ",".join(spec.allowed_tools)]
        if spec.max_budget_usd is not None:
            argv += ["--max-budget-usd", f"{max(spec.max_budget_usd, 0.0):.6f}"]
        if mcp_config is not None:
            argv += ["--mcp-config", str(mcp_config)]
        return argv + list(spec.extra_args)

    def _setting_sources(self) -> list[str]:
        """The directory's ``.claude/settings*.json`` are the repository's (or a sandboxed
        agent's) words: hooks that would run with the owner's rights, allow rules that would
        skip the owner's taps; ``-p`` skips the trust dialog that would ask. Only the user's
        own settings load, unless the owner opted in (DETACH_CLAUDE_PROJECT_SETTINGS)."""
        return [] if self._project_settings else ["--setting-sources", "user"]

    async def version(self) -> str:
        argv = [self._binary or "claude", "--version"]
        try:
            proc = await created(
                asyncio.create_subprocess_exec(
                    *argv,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.DEVNULL,
                    env=self._env,
                )
            )
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
        except (OSError, TimeoutError) as exc:
            raise AgentNotInstalled(self.engine, self._binary) from exc
        match = _VERSION_RE.search(out.decode(errors="replace"))
        if proc.returncode != 0 or not match:
            raise AgentNotInstalled(self.engine, self._binary)
        return match.group(1)

    async def probe(self) -> Phrase:
        version = version_line(self.engine, await self.version(), PINNED_VERSION)
        problem = await asyncio.to_thread(self.sandbox_problem)
        line = Phrase("probe.engine", {"version": version, "sandbox": sandbox.status(problem)})
        if not self.logged_in():
            how = Phrase(LOGIN_HOW)
            line = Phrase(NO_LOGIN, {"engine": self.engine, "line": line, "how": how})
        elif self._warm is not None and self._template is None:  # at start-up: the last start
            self._template = await self._warm.recall(self.engine)
            self._rewarm()
        return line

    def logged_in(self) -> bool:
        """Whether the CLI has a way to the model: a key or token in its environment, a cloud
        provider switched on, or a login (``.credentials.json``) or key helper in its config
        directory. A guess from the outside; a turn's own "Not logged in" is the verdict."""
        if any(self._env.get(name) for name in CREDENTIAL_VARIABLES):
            return True
        home = Path(self._env.get("HOME") or Path.home())
        config = Path(self._env.get("CLAUDE_CONFIG_DIR") or home / ".claude")
        settings = config / "settings.json"
        return (config / ".credentials.json").is_file() or (
            settings.is_file() and "apiKeyHelper" in settings.read_text(errors="replace")
        )

    def sandbox_problem(self) -> Phrase | None:
        """Claude Code's Bash sandbox needs bubblewrap and socat on the agents' PATH."""
        return sandbox.problem(self._env)

    async def run(
        self,
        spec: TurnSpec,
        approver: Approver,
        steering: SteerInbox = NO_STEERING,
        ready: Ready = NOW,
    ) -> AsyncGenerator[AgentEvent, None]:
        try:
            async for event in self._run(spec, approver, steering, ready):
                yield event
        finally:
            running = asyncio.current_task()
            if running is None or not running.cancelling():  # no new agent while stopping
                self._rewarm()

    async def _run(
        self, spec: TurnSpec, approver: Approver, steering: SteerInbox, ready: Ready
    ) -> AsyncGenerator[AgentEvent, None]:
        env = await self._turn_env(spec)
        if self._mcp_ahead is not None:
            for server in spec.mcp_servers:
                self._mcp_ahead(server, env, spec.cwd)
        with mcp_config_file(spec) as mcp_config:
            argv = self.argv(spec, mcp_config)
            warm = await self._take_warm(spec, argv, env)
            async with agent_process(
                self.engine,
                self._binary,
                argv,
                spec,
                env,
                self._grace_s,
                warm=warm,
                own_tmp=True,
                ahead=self._ahead,
            ) as agent:
                channel = ClaudeChannel(agent.proc, approver, steering)
                try:
                    await ready()  # the turn's first transcript lines, while the CLI starts
                    log.debug("task %s turn %s: prompt given", spec.task_id, spec.turn_id)
                    await channel.send(user_line(spec.prompt))
                    async for event in self._events(agent.proc, channel):
                        if isinstance(event, TurnFinished) and _logged_out(event):
                            raise AgentCrashed(
                                NOT_LOGGED_IN, agent.proc.returncode, "", Phrase(LOGIN_HOW)
                            )
                        if isinstance(event, TurnFinished) and _no_session(event, spec):
                            raise SessionNotFound(self.engine, str(spec.resume_session_id))
                        yield event
                        if isinstance(event, TurnFinished):
                            # the result line is the verdict: an agent that lingers after it
                            # is stopped on the way out, and its answer is kept
                            if await wait_exit(agent.proc, self._grace_s):
                                _ended(agent.proc)
                            return
                    raise await agent.crashed(
                        "claude ended without a result",
                        self._grace_s * 2,
                        Phrase("agent.no_result", {"engine": self.engine}),
                    )
                finally:
                    await shielded(channel.aclose())

    async def _turn_env(self, spec: TurnSpec) -> dict[str, str]:
        env = self._env
        if spec.mcp_servers:  # -p starts the turn while MCP servers still connect: wait for them
            # (`detach mcp` is a Python process: 8-14 s to import on a loaded machine)
            env = {**env, "MCP_CONNECTION_NONBLOCKING": "0", "MCP_TIMEOUT": "60000"}
        # the CLI runs git in its directory at start, outside any sandbox: what an agent
        # planted in a .git there (a fsmonitor, a filter, a promisor remote) must not run
        sandboxed = spec.approval_mode is ApprovalMode.SANDBOX
        return under(env, await gitguard.turn_cli_env(spec, sandboxed))

    # -- warm agents (executors.warm) ------------------------------------------------------------
    def _warmable(self, spec: TurnSpec) -> bool:
        """A new task's turn with no MCP server (whose config names its task) may be warm."""
        return self._warm is not None and not spec.resume_session_id and not spec.mcp_servers

    async def _take_warm(
        self, spec: TurnSpec, argv: list[str], env: Mapping[str, str]
    ) -> AgentProcess | None:
        if self._warm is None or not self._warmable(spec):
            return None
        template = warm_template(spec)
        if template != self._template:
            self._template = template
            self._warm.remember(self.engine, template)  # for the next start-up
        if not self._warm.holding:
            return None
        return self._warm.take(await self._warm_key(spec, argv, env))

    def _rewarm(self) -> None:
        """After any turn: the last new task's start warmed again, as things are now."""
        if self._warm is not None and self._template is not None:
            self._warm.replenish(functools.partial(self._warm_start, self._template))

    async def _warm_start(self, template: TurnSpec) -> WarmStart:
        env = await self._turn_env(template)
        argv = self.argv(template)
        key = await self._warm_key(template, argv, env)
        return WarmStart(key, tuple(argv), env, template.process_tag, own_tmp=True)

    async def _warm_key(self, spec: TurnSpec, argv: list[str], env: Mapping[str, str]) -> WarmKey:
        return await warm_key(
            engine=self.engine,
            mode=spec.approval_mode.value,
            argv=argv,
            cwd=spec.cwd,
            env=env,
            files=claude_files(env, spec.cwd, self._project_settings),
            deny=spec.deny_read,
            nice=spec.nice,
        )

    @staticmethod
    async def _events(
        proc: asyncio.subprocess.Process, channel: ClaudeChannel
    ) -> AsyncGenerator[AgentEvent, None]:
        """Events from stdout until the result; a line that cannot be understood is logged and
        skipped, never fatal to the turn."""
        assert proc.stdout is not None
        async for line in read_lines(proc.stdout, proc):
            data = json_object(line)
            if data.get("type") == "control_request":
                channel.answer(data)
                continue
            replayed = replayed_text(data)
            if replayed is not None:
                for event in channel.steering.replayed(replayed):
                    yield event
                continue
            try:
                events = parse_event(data)
            except (TypeError, ValueError, AttributeError, KeyError):
                log.warning(
                    "claude pid %s: skipped a line of unexpected shape: %.200s", proc.pid, line
                )
                continue
            for event in events:
                channel.steering.observe(event)
                if isinstance(event, TurnFinished):
                    deferred = await channel.steering.finished()  # nothing written after it
                    channel.close()  # the turn is over: the CLI exits on EOF
                    for steer in deferred:
                        yield steer
                yield event
                if isinstance(event, TurnFinished):
                    return


CREDENTIAL_VARIABLES = (
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
)
LOGIN_HOW = "agent.claude_login"  # NOT_LOGGED_IN, in the chat's language
NOT_LOGGED_IN = (
    "Claude Code is not logged in on the machine the bot runs on: run `claude` once in a "
    "terminal there (as the bot's user) and log in, or give the bot ANTHROPIC_API_KEY"
)


def _logged_out(final: TurnFinished) -> bool:
    """The CLI's own words without a login (2.1.197: "Not logged in · Please run /login")."""
    return final.is_error and "Please run /login" in (final.result_text or "")


def _ended(proc: asyncio.subprocess.Process) -> None:
    """A claude killed after its answer (by a signal, not its own exit) may not have written
    its session's last lines: the next turn's resume would miss them."""
    if proc.returncode is not None and proc.returncode < 0:
        log.warning(
            "claude pid %s was killed (signal %s) after its answer", proc.pid, -proc.returncode
        )


def _no_session(event: TurnFinished, spec: TurnSpec) -> bool:
    """A resume the CLI refused: it has no such conversation here (2.1.197: the result's
    errors say "No conversation found with session ID: …", nothing ran)."""
    return bool(spec.resume_session_id) and any(
        "No conversation found with session ID" in error for error in event.errors
    )


def _session_uuid(session_id: str) -> uuid.UUID:
    """A stored session id; one that is not a UUID never reaches the command line."""
    try:
        return uuid.UUID(session_id)
    except ValueError as exc:
        raise AgentCrashed(
            "the stored session id is not a UUID; start a new task",
            None,
            "",
            Phrase("agent.bad_session_id"),
        ) from exc


class ClaudeSettings(EngineSettings):
    """DETACH_CLAUDE_*."""

    claude_bin: str | None = None  # else ``claude`` on PATH
    # load the working directory's ``.claude/settings.json``, ``settings.local.json`` (hooks,
    # permission rules, MCP enabling) as an interactive ``claude`` would once trusted: only
    # for an owner who trusts every repository a task runs in (and every agent that wrote it)
    claude_project_settings: bool = False


def _make(config: EngineConfig) -> ClaudeExecutor:
    return ClaudeExecutor(
        config.binary,
        config.environ,
        config.secrets,
        config.cancel_grace_s,
        project_settings=config.settings_of(ClaudeSettings).claude_project_settings,
        warm=config.warm if isinstance(config.warm, WarmPool) else None,
        mcp_ahead=config.mcp_ahead,
        ahead=config.spawn_ahead if isinstance(config.spawn_ahead, SpawnAhead) else None,
    )


SPEC = EngineSpec(
    name="claude",
    isolation={  # docs/security.md, "Routing"
        ApprovalMode.AUTO: Isolation.OWNER_RIGHTS,
        ApprovalMode.ASK: Isolation.TAPS,
        ApprovalMode.READONLY: Isolation.RULES,
        ApprovalMode.SANDBOX: Isolation.SANDBOX_NETWORK,
    },
    default_binary="claude",
    pinned_version=PINNED_VERSION,
    make=_make,
    mcp_client=True,
    terminal_resume=("claude", "--resume"),
    settings=ClaudeSettings,
    presets=(
        Preset("opus", "claude", "opus", (), 15.0, 75.0, 1.5, 18.75),
        Preset("sonnet", "claude", "sonnet", (), 3.0, 15.0, 0.3, 3.75),
        Preset("haiku", "claude", "haiku", (), 1.0, 5.0, 0.1, 1.25),
    ),
)
