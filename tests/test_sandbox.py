"""Sandboxed mode with the real pinned CLIs against the scripted model servers: inside the
task's directory the agent acts with no approval; outside it nothing happens without one; the
sandbox is really on (the commands see its restrictions), and without bubblewrap Claude refuses
to run rather than run unsandboxed."""

from __future__ import annotations

import asyncio
import shutil
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bot.events import ApprovalDecision, ToolFinished, TurnFinished
from bot.models import ApprovalMode, TurnSpec
from bot.telegram.texts import Texts
from executors import sandbox
from executors.claude import ClaudeExecutor
from executors.codex import CodexExecutor
from tests.support.machine import path_without_bwrap
from tests.test_claude_executor import Scripted, collect
from tests.test_codex_executor import PATCH
from tests.test_codex_executor import collect as collect_codex

# what a command inside the sandbox sees: no new privileges, seccomp on, / read-only
PROBE = "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status"


def sandboxed(prompt: str, cwd: Path, domains: tuple[str, ...] = ()) -> TurnSpec:
    return TurnSpec(
        task_id=1,
        turn_id=1,
        prompt=prompt,
        cwd=cwd,
        approval_mode=ApprovalMode.SANDBOX,
        sandbox_domains=domains,
    )


def bash(command: str, **extra: object) -> dict:
    return {
        "tool_use": {"name": "Bash", "input": {"command": command, "description": "d", **extra}}
    }


def fetched(url: str) -> str:
    """curl the url through the sandbox's proxy and print the status. Claude's sandbox starts
    its bridge to the proxy (socat on localhost:3128) and the command together: on a loaded
    machine curl met the port still closed (exit 7, nothing asked, "000"), so it tries again
    (a loop or a ``$(…)`` in the command would make Claude ask for the command itself)."""
    retry = "--retry 10 --retry-connrefused --retry-delay 1"
    return f"curl {retry} -sS -m 5 -o /dev/null -w '%{{http_code}}' {url}"


@pytest.fixture
def listed_host() -> Iterator[str]:
    """A URL on 127.0.0.2 that answers 204 (nothing leaves the machine)."""

    class NoContent(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.2", 0), NoContent)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.2:{server.server_port}/"
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
def outside() -> Path:
    """A path outside every task's directory; removed afterwards if a test let it appear."""
    path = Path(f"/tmp/outside-{uuid.uuid4().hex[:10]}")
    yield path
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def tool_outputs(events: list) -> str:
    return "\n".join(e.output for e in events if isinstance(e, ToolFinished))


def statuses(events: list) -> list[str]:
    """Each command's last word: the status ``fetched`` printed (after any retry's warning)."""
    return [(e.output.split() or [""])[-1] for e in events if isinstance(e, ToolFinished)]


async def test_claude_works_freely_inside_and_cannot_write_outside(
    claude_bin, agent_env, anthropic, workdir, outside
):
    assert sandbox.problem(agent_env) is None, "bubblewrap and socat must be installed"
    anthropic.script(
        "MARK-SBX1",
        [
            bash(f"echo made > inside.txt && {PROBE}; touch {outside}; echo rc=$?"),
            {"tool_use": {"name": "Write", "input": {"file_path": "edit.txt", "content": "x\n"}}},
            {"text": "worked inside"},
        ],
    )
    approver = Scripted()  # denies whatever it is asked
    events = await collect(
        ClaudeExecutor(claude_bin, agent_env), sandboxed("MARK-SBX1 go", workdir), approver
    )
    assert approver.requests == []  # not one approval for work inside the directory
    assert (workdir / "inside.txt").read_text() == "made\n"
    assert (workdir / "edit.txt").read_text() == "x\n"
    assert not outside.exists()
    output = tool_outputs(events)
    assert "NoNewPrivs:\t1" in output and "Seccomp:\t2" in output
    assert "Read-only file system" in output and "rc=1" in output
    assert isinstance(events[-1], TurnFinished) and not events[-1].is_error


async def test_claude_asks_before_leaving_the_sandbox(
    claude_bin, agent_env, anthropic, workdir, outside
):
    anthropic.script(
        "MARK-SBX2",
        [
            bash(f"touch {outside}", dangerouslyDisableSandbox=True),
            {
                "tool_use": {
                    "name": "Write",
                    "input": {"file_path": f"{outside}/x.txt", "content": "x\n"},
                }
            },
            bash(fetched("http://detach-test.invalid/")),
            {"text": "stayed inside"},
        ],
    )
    approver = Scripted()  # every request is denied
    events = await collect(
        ClaudeExecutor(claude_bin, agent_env), sandboxed("MARK-SBX2 go", workdir), approver
    )
    asked = [(r.tool_name, r.tool_input.get("host") or r.blocked_path) for r in approver.requests]
    assert len(asked) == 3, (asked, tool_outputs(events))
    assert asked[0] == ("Bash", str(outside))
    assert approver.requests[0].tool_input.get("dangerouslyDisableSandbox") is True
    assert asked[1][0] == "Write"
    assert asked[2] == ("SandboxNetworkAccess", "detach-test.invalid")
    assert approver.requests[2].rule == "WebFetch(domain:detach-test.invalid)"
    assert not outside.exists()
    assert "403" in tool_outputs(events)  # the sandbox's proxy refused the host
    assert not events[-1].is_error


async def test_claude_allows_a_listed_host_without_asking(
    claude_bin, agent_env, anthropic, workdir, listed_host
):
    """A host in DETACH_SANDBOX_ALLOWED_DOMAINS is not asked for: the sandbox's proxy reaches
    it (127.0.0.2, so nothing leaves the machine: it answers 204); an unlisted host is asked
    for and, denied, gets 403 from the proxy."""
    env = {k: v for k, v in agent_env.items() if k.lower() != "no_proxy"}
    anthropic.script(
        "MARK-SBX3",
        [
            bash(fetched(listed_host)),
            bash(fetched("http://other.invalid/")),
            {"text": "tried"},
        ],
    )
    approver = Scripted()
    events = await collect(
        ClaudeExecutor(claude_bin, env),
        sandboxed("MARK-SBX3 go", workdir, domains=("127.0.0.2",)),
        approver,
    )
    outputs = [e.output for e in events if isinstance(e, ToolFinished)]
    assert [r.tool_input for r in approver.requests] == [{"host": "other.invalid"}], outputs
    assert "204" in outputs[0] and "403" in outputs[1]


async def test_two_sandboxed_turns_at_once_each_go_through_their_own_proxy(
    claude_bin, agent_env, anthropic, tmp_path, listed_host
):
    """Every agent is pid 2 in its PID namespace, and the sandbox runtime names its proxy's
    sockets by pid: in a shared temporary directory the second turn took the first's, and its
    commands' traffic went through the other turn's proxy (its allowed hosts, its answers)."""
    env = {k: v for k, v in agent_env.items() if k.lower() != "no_proxy"}
    curl = "sleep 1; " + fetched(listed_host)
    turns = []
    for name, domains in (("MARK-SBXA", ("127.0.0.2",)), ("MARK-SBXB", ())):
        anthropic.script(name, [bash(curl), bash(curl), {"text": "tried"}])
        workdir = tmp_path / name
        workdir.mkdir()
        turns.append((sandboxed(f"{name} go", workdir, domains=domains), Scripted()))
    results = await asyncio.gather(
        *(collect(ClaudeExecutor(claude_bin, env), turn, approver) for turn, approver in turns)
    )
    (_, listed), (_, unlisted) = turns
    assert listed.requests == []  # its host is allowed: its own proxy tries it
    assert [r.tool_input for r in unlisted.requests] == [{"host": "127.0.0.2"}] * 2
    assert statuses(results[0]) == ["204", "204"]
    assert statuses(results[1]) == ["403", "403"]


async def test_claude_without_bubblewrap_refuses_to_run_unsandboxed(
    claude_bin, agent_env, anthropic, workdir, tmp_path
):
    env = {**agent_env, "PATH": path_without_bwrap(tmp_path)}
    anthropic.script("MARK-SBX4", [bash("touch inside.txt"), {"text": "ran"}])
    executor = ClaudeExecutor(claude_bin, env)
    problem = executor.sandbox_problem()
    assert problem is not None and "bwrap" in Texts().say("en", problem)
    events = await collect(executor, sandboxed("MARK-SBX4 go", workdir))
    final = events[-1]
    assert isinstance(final, TurnFinished) and final.is_error
    assert "Sandbox required but unavailable" in " ".join(final.errors)
    assert not (workdir / "inside.txt").exists()
    assert anthropic.requests_for("MARK-SBX4") == []


async def test_codex_works_freely_inside_and_cannot_write_outside(
    codex_bin, codex_env, openai, workdir, outside
):
    openai.script(
        "MARK-CSBX1",
        [
            {"shell": f"echo made > inside.txt && {PROBE}; touch {outside}; echo rc=$?"},
            {"patch": PATCH},
            {"text": "worked inside"},
        ],
    )
    approver = Scripted()
    executor = CodexExecutor(codex_bin, codex_env)
    events = await collect_codex(executor, sandboxed("MARK-CSBX1 go", workdir), approver)
    assert approver.requests == []
    assert (workdir / "inside.txt").read_text() == "made\n"
    assert (workdir / "hello.txt").read_text() == "hello from codex\n"
    assert not outside.exists()
    output = tool_outputs(events) + str(openai.requests_for("MARK-CSBX1")[-1])
    assert "Read-only file system" in output and "rc=1" in output
    assert "NoNewPrivs:\\t1" in output or "NoNewPrivs:\t1" in output
    assert not events[-1].is_error


async def test_codex_asks_before_leaving_the_sandbox(
    codex_bin, codex_env, openai, workdir, outside
):
    openai.script(
        "MARK-CSBX2",
        [
            {
                "shell": f"touch {outside}",
                "sandbox_permissions": "require_escalated",
                "justification": "needs to write outside",
            },
            {"shell": f"touch {outside}", "sandbox_permissions": "require_escalated"},
            {"patch": f"*** Begin Patch\n*** Add File: {outside}\n+x\n*** End Patch\n"},
            {"shell": "curl -sS -m 3 http://127.0.0.2:9/; echo rc=$?"},
            {"text": "asked three times"},
        ],
    )
    approver = Scripted(ApprovalDecision(allow=False))
    events = await collect_codex(
        CodexExecutor(codex_bin, codex_env), sandboxed("MARK-CSBX2 go", workdir), approver
    )
    asked = [
        r.tool_input.get("command") or r.tool_input.get("file_path") for r in approver.requests
    ]
    assert asked == [f"touch {outside}", f"touch {outside}", str(outside)]
    assert not outside.exists()
    # Codex's sandbox has no network and no per-host prompt: the request just fails
    assert "rc=7" in str(openai.requests_for("MARK-CSBX2")[-1]) and events[-1].result_text
