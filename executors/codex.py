"""Codex CLI engine: ``codex app-server`` (JSON-RPC over stdio), the only Codex mode that can
ask for approval. One app-server per turn; the thread id is the session, resumed by id."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import re
import signal
import tomllib
from collections.abc import AsyncGenerator, Iterable, Mapping
from pathlib import Path
from typing import Any

from bot.errors import AgentCrashed, AgentNotInstalled, SessionNotFound
from bot.events import AgentEvent, SessionStarted, TurnFinished
from bot.models import ApprovalMode, Phrase, Preset, TurnSpec
from bot.ports import (
    NO_STEERING,
    NOW,
    Approver,
    EngineConfig,
    EngineSettings,
    EngineSpec,
    Isolation,
    Ready,
    SteerInbox,
)
from executors import gitguard, leftovers, orphans
from executors.ahead import SpawnAhead
from executors.codex_mcp import mcp_config, servers_settled
from executors.codex_protocol import (
    COMMAND_APPROVAL,
    FILE_APPROVAL,
    TurnState,
    approval_request,
    decision_result,
    notification_events,
)
from executors.codex_refusal import refusal
from executors.codex_rpc import Rpc
from executors.codex_sandbox import PROFILED, kept_dirs, profile_config
from executors.codex_steer import CodexSteering
from executors.gitscope import under
from executors.process import (
    agent_env,
    agent_process,
    created,
    version_line,
)
from executors.shield import shielded

log = logging.getLogger(__name__)

PINNED_VERSION = "0.171.0"
QUIET_CONFIG = (
    "analytics.enabled=false",
    "features.plugins=false",
    "check_for_update_on_startup=false",
)


class CodexSettings(EngineSettings):
    """DETACH_CODEX_*."""

    codex_bin: str | None = None  # the native binary, else ``codex`` on PATH
    codex_approval_policy: str = "untrusted"  # every command and file change is asked
    codex_sandbox: str = "workspace-write"  # or read-only, danger-full-access


class CodexExecutor:
    engine = "codex"

    def __init__(
        self,
        binary: str | None,
        env: Mapping[str, str],
        secrets: Iterable[str] = (),
        cancel_grace_s: float = 5.0,
        settings: CodexSettings | None = None,
        *,
        ahead: SpawnAhead | None = None,
    ) -> None:
        """``ahead``: the app-server's process chain started ahead (``EngineConfig``)."""
        settings = settings or CodexSettings()
        self._ahead = ahead
        self._binary = binary
        self._env = agent_env(env, secrets)
        self._grace_s = cancel_grace_s
        self.approval_policy = settings.codex_approval_policy
        self.sandbox = settings.codex_sandbox
        self._sandbox_refused: Phrase | None = None

    def refuse_sandbox(self, reason: Phrase) -> None:
        """The start-up probe found that the sandbox cannot work: refuse sandboxed turns with a
        clear reason instead of letting every command fail."""
        self._sandbox_refused = reason

    def argv(self, spec: TurnSpec) -> list[str]:
        if not self._binary:
            raise AgentNotInstalled(self.engine, self._binary)
        argv = [self._binary, "app-server"]
        for item in QUIET_CONFIG:
            argv += ["-c", item]
        if spec.model:
            argv += ["-c", f"model={json.dumps(spec.model)}"]
        if spec.approval_mode in PROFILED:  # a permission profile: codex_sandbox.py
            argv += profile_config(spec, self._env, PROFILED[spec.approval_mode])
        argv += mcp_config(spec.mcp_servers)  # `detach mcp` (codex_mcp.py)
        return argv + list(spec.extra_args)

    async def _output(self, *args: str) -> tuple[int, str]:
        try:
            proc = await created(
                asyncio.create_subprocess_exec(
                    self._binary or "codex",
                    *args,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    env=self._env,
                )
            )
            out, _ = await asyncio.wait_for(proc.communicate(), 60)
        except (OSError, TimeoutError) as exc:
            raise AgentNotInstalled(self.engine, self._binary) from exc
        return proc.returncode or 0, out.decode(errors="replace")

    async def version(self) -> str:
        code, out = await self._output("--version")
        match = re.search(r"(\d+\.\d+\.\d+)", out)
        if code != 0 or not match:
            raise AgentNotInstalled(self.engine, self._binary)
        return match.group(1)

    async def sandbox_refusal(self) -> Phrase | None:
        """Why Codex's sandbox cannot run a command here (``codex sandbox -- /bin/true``), in
        the words of Codex's own error; None when it can."""
        code, out = await self._output(
            "sandbox", *sum((["-c", c] for c in QUIET_CONFIG), []), "--", "/bin/true"
        )
        if code != 0:
            log.warning("codex sandbox does not work here (%s)", out.strip()[-200:])
        return None if code == 0 else refusal(out, self._env)

    def sandbox_problem(self) -> Phrase | None:
        """Why Codex's sandbox cannot work here (found by the probe), or None."""
        return self._sandbox_refused

    def _policy(self, spec: TurnSpec) -> dict[str, str]:
        if spec.approval_mode is ApprovalMode.SANDBOX:
            # commands run sandboxed (the profile on the command line: a ``sandbox`` here would
            # select the older settings instead) without asking; the model asks to go outside
            return {"approvalPolicy": "on-request"}
        if spec.approval_mode is ApprovalMode.ASK:
            return {"approvalPolicy": self.approval_policy, "sandbox": self.sandbox}
        if spec.approval_mode is ApprovalMode.READONLY:  # read-only, and the secrets hidden
            return {"approvalPolicy": "never"}
        return {"approvalPolicy": "never", "sandbox": self.sandbox}

    def _check_sandbox(self, spec: TurnSpec) -> None:
        unsandboxed = self._policy(spec).get("sandbox") == "danger-full-access"
        if self._sandbox_refused is not None and not unsandboxed:
            raise AgentCrashed(
                f"Codex's sandbox cannot work on this machine ({self._sandbox_refused.key}); "
                "set DETACH_CODEX_SANDBOX=danger-full-access to run unsandboxed with approvals",
                None,
                "",
                Phrase("agent.codex_sandbox_refused"),
            )

    async def probe(self) -> Phrase:
        """The version, and whether the sandbox can work here: where it cannot, sandboxed turns
        are refused with a clear reason (not every command failing)."""
        line = version_line(self.engine, await self.version(), PINNED_VERSION)
        reason = None if self.sandbox == "danger-full-access" else await self.sandbox_refusal()
        if reason is None:
            mode = Phrase("probe.sandbox_mode", {"mode": self.sandbox})
            return Phrase("probe.engine", {"version": line, "sandbox": mode})
        self.refuse_sandbox(reason)
        log.warning(
            "codex sandbox cannot work here (%s): sandboxed Codex turns are refused; set "
            "DETACH_CODEX_SANDBOX=danger-full-access to run unsandboxed with approvals",
            reason.key,
        )
        return Phrase("probe.codex_refused", {"version": line, "reason": reason})

    async def run(
        self,
        spec: TurnSpec,
        approver: Approver,
        steering: SteerInbox = NO_STEERING,
        ready: Ready = NOW,
    ) -> AsyncGenerator[AgentEvent, None]:
        self._check_sandbox(spec)
        absent = leftovers.absent(self._writable_roots(spec))
        kept_dirs(spec)
        try:
            async with contextlib.aclosing(self._run(spec, approver, steering, ready)) as events:
                async for event in events:
                    yield event
        finally:
            # its orphans first: what still runs of the turn holds no mount point removed next
            await shielded(orphans.ended(Path(spec.cwd)))
            leftovers.remove_left(absent)

    def _writable_roots(self, spec: TurnSpec) -> list[Path]:
        """Where the turn's sandbox may write: the task's directory, and unless excluded
        (sandboxed mode) /tmp and $TMPDIR; nowhere when it is read-only or off."""
        roots = [Path(spec.cwd)]
        if spec.approval_mode is ApprovalMode.SANDBOX:
            return roots
        if self._policy(spec).get("sandbox") != "workspace-write":
            return []
        tmpdir = self._env.get("TMPDIR")
        return [*roots, Path("/tmp"), *([Path(tmpdir)] if tmpdir else [])]

    async def _run(
        self, spec: TurnSpec, approver: Approver, inbox: SteerInbox, ready: Ready
    ) -> AsyncGenerator[AgentEvent, None]:
        env = self._env
        # the CLI runs git in its directory at start, outside any sandbox: what an agent
        # planted in a .git there (a fsmonitor, a filter, a promisor remote) must not run
        sandboxed = spec.approval_mode is ApprovalMode.SANDBOX
        env = under(env, await gitguard.turn_cli_env(spec, sandboxed))
        # SIGTERM, not SIGINT: SIGINT leaves the sandbox's mount points behind
        async with agent_process(
            self.engine,
            self._binary,
            self.argv(spec),
            spec,
            env,
            self._grace_s,
            first=signal.SIGTERM,
            ahead=self._ahead,
        ) as agent:
            rpc = Rpc(agent.proc)
            started: tuple[str, str] | None = None
            finished = False
            try:
                started, model = await self._start(rpc, spec, ready)
                yield SessionStarted(started[0], model or spec.model or self.configured_model())
                steering = CodexSteering(inbox, rpc, *started)
                async with contextlib.aclosing(
                    self._turn_events(rpc, started[0], approver, steering)
                ) as events:
                    async for event in events:
                        finished = isinstance(event, TurnFinished)
                        yield event
                if not finished:
                    raise await agent.crashed(
                        "codex ended without completing the turn",
                        self._grace_s,
                        Phrase("agent.no_result", {"engine": self.engine}),
                    )
            finally:
                running = not finished and agent.proc.returncode is None
                await shielded(self._close(rpc, started if running else None))

    @staticmethod
    async def _close(rpc: Rpc, started: tuple[str, str] | None) -> None:
        """Interrupt the ``(thread, turn)`` still running (best effort, bounded), then close."""
        if started:
            with contextlib.suppress(Exception):  # best effort before the stop
                await rpc.request(
                    "turn/interrupt", {"threadId": started[0], "turnId": started[1]}, timeout_s=2
                )
        await rpc.aclose()

    async def _turn_events(
        self, rpc: Rpc, thread_id: str, approver: Approver, steering: CodexSteering
    ) -> AsyncGenerator[AgentEvent, None]:
        """Notifications up to ``turn/completed``; approval requests are answered alongside,
        steers sent alongside (what became of them said with the next notification)."""
        state = TurnState()
        try:
            async for message in rpc.incoming():
                steering.shown(message)
                for said in steering.said():
                    yield said
                if "id" in message and message.get("method"):
                    rpc.spawn(self._answer(rpc, message, state, approver))
                    continue
                for event in _events_of(message, state):
                    if isinstance(event, TurnFinished):
                        for said in await steering.finished():
                            yield said
                        rpc.close()  # the turn is over: the app-server exits on EOF
                        yield _with_session(event, thread_id)
                        return
                    yield event
        finally:
            await steering.aclose()

    def configured_model(self) -> str | None:
        """The model of the user's Codex config (``$CODEX_HOME/config.toml``), for a thread
        that names none: what the turn is priced as."""
        home = self._env.get("CODEX_HOME") or str(Path(self._env.get("HOME") or "~") / ".codex")
        try:
            config = tomllib.loads((Path(home).expanduser() / "config.toml").read_text())
        except (OSError, ValueError):
            return None
        model = config.get("model")
        return model if isinstance(model, str) else None

    async def _start(
        self, rpc: Rpc, spec: TurnSpec, ready: Ready
    ) -> tuple[tuple[str, str], str | None]:
        """The thread and turn started, and the model the thread runs (as Codex names it);
        the turn (the prompt) once ``ready`` returned."""
        await rpc.request(
            "initialize",
            {
                "clientInfo": {"name": "detach", "title": None, "version": "0.1"},
                "capabilities": {"experimentalApi": False, "requestAttestation": False},
            },
        )
        await rpc.notify("initialized")
        policy = self._policy(spec)
        if spec.resume_session_id:
            try:
                thread = await rpc.request(
                    "thread/resume", {"threadId": spec.resume_session_id, **policy}
                )
            except AgentCrashed as exc:  # its rollout file is not on this machine
                raise SessionNotFound(self.engine, spec.resume_session_id) from exc
        else:
            thread = await rpc.request("thread/start", {"cwd": str(spec.cwd), **policy})
        thread_id = str(thread["thread"]["id"])
        if spec.mcp_servers:
            await servers_settled(rpc, {s.name for s in spec.mcp_servers})
        text = spec.prompt
        if spec.append_system_prompt:
            text = f"{spec.append_system_prompt}\n\n{text}"
        await ready()
        turn = await rpc.request(
            "turn/start",
            {"threadId": thread_id, "input": [{"type": "text", "text": text, "text_elements": []}]},
        )
        model = thread.get("model") or thread["thread"].get("model")
        return (thread_id, str(turn["turn"]["id"])), model if isinstance(model, str) else None

    async def _answer(
        self, rpc: Rpc, message: dict[str, Any], state: TurnState, approver: Approver
    ) -> None:
        method = str(message.get("method"))
        if method not in (COMMAND_APPROVAL, FILE_APPROVAL):
            await rpc.send(
                {
                    "id": message["id"],
                    "error": {"code": -32601, "message": f"unsupported: {method}"},
                }
            )
            return
        decision = await approver.decide(
            approval_request(method, message.get("params") or {}, state)
        )
        await rpc.send({"id": message["id"], "result": decision_result(decision)})


def _events_of(message: dict[str, Any], state: TurnState) -> list[AgentEvent]:
    """A notification's events; one of unexpected shape is logged and skipped."""
    params = message.get("params")
    try:
        return notification_events(
            str(message.get("method")), params if isinstance(params, dict) else {}, state
        )
    except (TypeError, ValueError, AttributeError, KeyError):
        log.warning("codex: skipped a notification of unexpected shape: %.200s", message)
        return []


def _with_session(event: TurnFinished, thread_id: str) -> TurnFinished:
    return dataclasses.replace(event, session_id=thread_id)


def _make(config: EngineConfig) -> CodexExecutor:
    return CodexExecutor(
        config.binary,
        config.environ,
        config.secrets,
        config.cancel_grace_s,
        config.settings_of(CodexSettings),
        ahead=config.spawn_ahead if isinstance(config.spawn_ahead, SpawnAhead) else None,
    )


SPEC = EngineSpec(
    name="codex",
    isolation={  # docs/security.md, "Routing"
        ApprovalMode.AUTO: Isolation.OWNER_RIGHTS,
        ApprovalMode.ASK: Isolation.TAPS,
        ApprovalMode.READONLY: Isolation.SANDBOX_ALL,
        ApprovalMode.SANDBOX: Isolation.SANDBOX_ALL,
    },
    default_binary="codex",
    pinned_version=PINNED_VERSION,
    make=_make,
    terminal_resume=("codex", "resume"),
    settings=CodexSettings,
    mcp_client=True,
    presets=(
        Preset("gpt-5.5", "codex", "gpt-5.5", (), 1.25, 10.0, 0.125, 0.0),
        Preset("gpt-6.2-sol", "codex", "gpt-6.2-sol", (), 1.25, 10.0, 0.125, 0.0),
    ),
)
