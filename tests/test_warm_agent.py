"""Warm agents (DETACH_WARM_AGENTS, executors.warm): the real pinned claude CLI against the
scripted Anthropic server. A warm process serves only a task whose start would be identical
(same directory, mode, settings, deny list, login, repository state), holds no task's data
before it is given one, and is gone after its TTL and at shutdown."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from bot.events import TextEmitted, TurnFinished
from bot.models import ApprovalMode, McpServerSpec, TurnSpec
from executors.claude import ClaudeExecutor
from executors.procs import all_pids, env_of
from executors.tree import descendants
from executors.warm import WarmPool
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_claude_executor import Scripted

WAIT_S = 30.0
TAG = "warmtest"
BOT_TOKEN = "123456:AAH-bot-token-not-for-agents"


def spec(prompt: str, cwd: Path, task_id: int = 1, **changes: object) -> TurnSpec:
    base = TurnSpec(
        task_id=task_id,
        turn_id=task_id,
        prompt=prompt,
        cwd=cwd,
        approval_mode=ApprovalMode.ASK,
        process_tag=f"{TAG}{os.getpid()}:{task_id}.1",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


async def answer(executor: ClaudeExecutor, turn: TurnSpec) -> str:
    events = [event async for event in executor.run(turn, Scripted())]
    final = events[-1]
    assert isinstance(final, TurnFinished) and not final.is_error, final
    return "".join(e.text for e in events if isinstance(e, TextEmitted))


async def held(pool: WarmPool) -> int:
    """The warm process's pid, once it is ready (bounded)."""
    async with asyncio.timeout(WAIT_S):
        while pool.held_pid is None:
            await asyncio.sleep(0.05)
    assert pool.held_pid is not None
    return pool.held_pid


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def gone(pids: list[int]) -> None:
    async with asyncio.timeout(WAIT_S):
        while any(alive(p) for p in pids):
            await asyncio.sleep(0.05)


def tree(pid: int) -> list[int]:
    return [pid, *(p.pid for p in descendants(pid))]


@pytest.fixture
async def pool():
    warm = WarmPool(ttl_s=600)
    yield warm
    await warm.aclose()


@pytest.fixture
def executor(claude_bin, agent_env, pool) -> ClaudeExecutor:
    environ = {**agent_env, "DETACH_BOT_TOKEN": BOT_TOKEN, "LEAKY": f"x{BOT_TOKEN}"}
    return ClaudeExecutor(claude_bin, environ, secrets=[BOT_TOKEN], warm=pool)


async def test_the_next_new_task_takes_the_warm_process(executor, pool, anthropic, workdir):
    anthropic.script("WARM-ONE", [{"text": "first answer"}])
    anthropic.script("WARM-TWO", [{"text": "second answer"}])
    assert await answer(executor, spec("WARM-ONE go", workdir, 1)) == "first answer"
    pid = await held(pool)
    assert pool.counts.taken == 0
    assert await answer(executor, spec("WARM-TWO go", workdir, 2)) == "second answer"
    assert pool.counts.taken == 1
    await gone([pid])  # used once, then stopped: never used again
    assert await held(pool) != pid  # the next one is another process


def _git(cwd: Path, *args: str) -> None:
    ident = ("-c", "user.name=t", "-c", "user.email=t@t")
    subprocess.run(["git", *ident, "-C", str(cwd), *args], check=True, capture_output=True)


def _other_dir(workdir: Path) -> dict[str, object]:
    other = workdir.parent / "other"
    other.mkdir()
    return {"cwd": other}


def _new_login(workdir: Path) -> dict[str, object]:
    config = workdir.parent / "home" / ".claude"
    config.mkdir(parents=True, exist_ok=True)
    (config / "settings.json").write_text('{"env": {"CHANGED": "1"}}')
    return {}


def _new_commit(workdir: Path) -> dict[str, object]:
    (workdir / "made.txt").write_text("x")
    _git(workdir, "add", ".")
    _git(workdir, "commit", "-qm", "made")
    return {}


CHANGES = {
    "directory": _other_dir,
    "mode": lambda _: {"approval_mode": ApprovalMode.AUTO},
    "model": lambda _: {"model": "claude-sonnet-4-5"},
    "allowed_tools": lambda _: {"allowed_tools": ("Read",)},
    "deny_list": lambda w: {"deny_read": (w.parent / "secret",)},
    "settings_file": _new_login,
    "repository": _new_commit,
}


@pytest.mark.parametrize("change", CHANGES, ids=str)
async def test_never_used_when_the_start_would_differ(change, executor, pool, anthropic, workdir):
    _git(workdir, "init", "-q")
    _git(workdir, "commit", "-q", "--allow-empty", "-m", "first")
    anthropic.script("DIFF-ONE", [{"text": "first"}])
    anthropic.script("DIFF-TWO", [{"text": "cold answer"}])
    await answer(executor, spec("DIFF-ONE go", workdir, 1))
    pid = await held(pool)
    second = replace(spec("DIFF-TWO go", workdir, 2), **CHANGES[change](workdir))
    assert await answer(executor, second) == "cold answer"
    assert pool.counts.taken == 0 and pool.counts.discarded >= 1
    await gone([pid])  # the warm one was stopped, not kept beside the cold start


async def test_a_resumed_turn_is_never_warm(executor, pool, anthropic, workdir):
    anthropic.script("RES-ONE", [{"text": "one"}, {"text": "resumed"}])
    events = [e async for e in executor.run(spec("RES-ONE go", workdir, 1), Scripted())]
    session = events[-1].session_id
    await held(pool)
    resumed = spec("RES-ONE more", workdir, 1, resume_session_id=session)
    assert await answer(executor, resumed) == "resumed"
    assert pool.counts.taken == 0


async def test_a_warm_process_holds_no_task_data(executor, pool, anthropic, workdir):
    goal = "GOAL-7f3a9 deploy the thing"
    anthropic.script("GOAL-7f3a9", [{"text": "done"}])
    await answer(executor, spec(goal, workdir, 987654))
    pid = await held(pool)
    seen = []
    for each in tree(pid):
        proc = Path(f"/proc/{each}")
        seen.append((proc / "cmdline").read_bytes())
        seen.append((proc / "environ").read_bytes())
        for fd in (proc / "fd").iterdir():
            seen.append(os.readlink(fd).encode())
    everything = b"\n".join(seen)
    for secret in (b"GOAL-7f3a9", b"987654", BOT_TOKEN.encode(), b"DETACH_BOT_TOKEN"):
        assert secret not in everything
    assert f"{TAG}{os.getpid()}:warm.".encode() in everything  # its own tag, not the task's


async def test_stopped_after_its_ttl_and_at_shutdown(claude_bin, agent_env, anthropic, workdir):
    anthropic.script("TTL", [{"text": "ok"}])
    short = WarmPool(ttl_s=1.0)
    executor = ClaudeExecutor(claude_bin, agent_env, warm=short)
    await answer(executor, spec("TTL one", workdir, 1))
    first = tree(await held(short))
    await gone(first)  # idle past its TTL: the whole tree stopped
    assert short.held_pid is None and short.counts.discarded == 1
    await answer(executor, spec("TTL two", workdir, 2))  # cold (none held), then warm again
    second = tree(await held(short))
    await short.aclose()
    assert not any(alive(pid) for pid in second)
    await answer(executor, spec("TTL three", workdir, 3))  # after shutdown: nothing starts
    await asyncio.sleep(0)
    assert short.held_pid is None and short.counts.started == 2


def warm_pids(prefix: str) -> list[int]:
    """The processes carrying a warm tag of this bot (TAG_ENV ``<prefix>:warm.<n>``)."""
    return [p for p in all_pids() if (env_of(p) or "").startswith(f"{prefix}:warm.")]


async def one_warm(prefix: str, other_than: int = 0) -> int:
    """A warm agent of this bot (its tools, if any, come later: the lowest pid)."""
    async with asyncio.timeout(WAIT_S):
        while not (found := [p for p in warm_pids(prefix) if p != other_than]):
            await asyncio.sleep(0.1)
    return min(found)


async def test_the_bot_gives_the_next_new_task_the_warm_claude(
    tmp_path, claude_bin, agent_env, anthropic, workdir, caplog
):
    anthropic.script("BOT-ONE", [{"text": "first task done"}])
    anthropic.script("BOT-TWO", [{"text": "second task done"}])
    caplog.set_level(logging.INFO, logger="executors.process")
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, warm_agents=True)
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            # an interactive task: no owner tools by default (DETACH_OWNER_TOOLS=walkaway), so
            # no MCP server, which no warm agent could have
            await fake.user_message("/claude BOT-ONE first", OWNER)
            await fake.wait_text(OWNER, "first task done", timeout_s=60)
            pid = await one_warm(app.core.tag)
            mark = len(fake.calls)
            await fake.user_message("/claude BOT-TWO second", OWNER)
            await fake.wait_text(OWNER, "second task done", timeout_s=60, after=mark)
            assert f"claude pid {pid} warm, taken" in caplog.text
            again = await one_warm(app.core.tag, other_than=pid)  # warmed for the next one
            await gone([pid])  # the one taken is gone with its turn
        await gone([again])  # the bot's shutdown stopped it


async def test_the_last_start_is_warmed_again_after_a_restart(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("KEPT", [{"text": "kept"}])
    saved = tmp_path / "private" / "warm.json"
    saved.parent.mkdir(mode=0o700)
    before = WarmPool(saved=saved)
    await answer(ClaudeExecutor(claude_bin, agent_env, warm=before), spec("KEPT one", workdir))
    await held(before)
    await before.aclose()
    assert saved.stat().st_mode & 0o077 == 0 and b"KEPT" not in saved.read_bytes()
    after = WarmPool(saved=saved)  # the next run of the bot
    executor = ClaudeExecutor(claude_bin, agent_env, warm=after)
    await executor.probe()  # at start-up
    await held(after)
    assert await answer(executor, spec("KEPT two", workdir, 2)) == "kept"
    assert after.counts.taken == 1
    await after.aclose()


async def test_sandboxed_warm_only_for_the_same_allowed_hosts(executor, pool, anthropic, workdir):
    anthropic.script("SBX-", [{"text": "sandboxed answer"}])
    sandboxed = {"approval_mode": ApprovalMode.SANDBOX, "sandbox_domains": ("a.example",)}
    await answer(executor, spec("SBX-1 go", workdir, 1, **sandboxed))
    first = await held(pool)
    assert await answer(executor, spec("SBX-2 go", workdir, 2, **sandboxed)) == "sandboxed answer"
    assert pool.counts.taken == 1  # the same sandbox: warm
    second = await held(pool)
    other = {**sandboxed, "sandbox_domains": ("a.example", "b.example")}
    assert await answer(executor, spec("SBX-3 go", workdir, 3, **other)) == "sandboxed answer"
    assert pool.counts.taken == 1  # another host allowed: cold, the warm one stopped
    await gone([first, second])


async def test_a_task_with_mcp_servers_is_never_warmed(executor, pool, anthropic, workdir):
    anthropic.script("MCP-TASK", [{"text": "with a server"}])
    server = McpServerSpec("detach", "/bin/true", ("--parent", "987654"), {})
    private = workdir.parent / "private"
    private.mkdir(mode=0o700)
    with_mcp = spec("MCP-TASK go", workdir, 1, mcp_servers=(server,), private_dir=private)
    assert await answer(executor, with_mcp) == "with a server"
    await pool.settled(WAIT_S)  # a start asked for after the turn would be done now
    assert pool.held_pid is None and pool.counts.started == 0


async def test_a_warm_start_looks_at_the_directory_itself(executor, pool, anthropic, workdir):
    """A turn's git environment (``git_env``: its baseline's look, taken before that turn ran)
    is not the warm start's after it: the warm CLI runs git at its start, in a directory the
    turn may have made a repository, so its environment comes from a look at that moment."""
    anthropic.script("WARM-GIT", [{"text": "looked"}])
    turn = spec("WARM-GIT go", workdir, 1, git_env=(("DETACH_TEST_LOOK", "the turn's"),))
    assert await answer(executor, turn) == "looked"
    pid = await held(pool)
    assert env_of(pid, "DETACH_TEST_LOOK") is None
    assert env_of(pid, "GIT_CONFIG_COUNT") is not None  # its own look's (safe.bareRepository)


async def test_an_owners_git_config_env_reaches_the_cli_under_ours(
    claude_bin, agent_env, pool, anthropic, workdir
):
    """The owner's own ``GIT_CONFIG_*`` (here ``safe.directory``) stay, ours after them."""
    owner = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory"}
    claude = ClaudeExecutor(
        claude_bin, {**agent_env, **owner, "GIT_CONFIG_VALUE_0": "*"}, warm=pool
    )
    anthropic.script("WARM-OWNER", [{"text": "kept"}])
    assert await answer(claude, spec("WARM-OWNER go", workdir, 1)) == "kept"
    pid = await held(pool)
    assert env_of(pid, "GIT_CONFIG_KEY_0") == "safe.directory"
    assert int(env_of(pid, "GIT_CONFIG_COUNT") or 0) >= 2
