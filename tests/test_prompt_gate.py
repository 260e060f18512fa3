"""A turn's agent gets its prompt only once ``Executor.run``'s ``ready`` returned (the turn's
first transcript lines are written while its process starts): the real claude and codex
processes run, and the model hears nothing of the task, until then. Through the bot, the
repository is read before any process of the agent exists: what the agent's start changes is
the turn's."""

from __future__ import annotations

import asyncio
import subprocess
import time

from bot.events import ToolCalled, TurnFinished
from bot.models import TaskStatus
from executors.claude import ClaudeExecutor
from executors.codex import CodexExecutor
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.processes import matching
from tests.test_checks import finished
from tests.test_claude_executor import Scripted
from tests.test_claude_executor import spec as claude_spec
from tests.test_codex_executor import spec as codex_spec

HELD_S = 3.0  # long enough for either CLI to start and, were it given its prompt, to ask


class Gate:
    """A ``ready`` held until ``open``; notes when it was first awaited."""

    def __init__(self) -> None:
        self.opened = asyncio.Event()
        self.awaited_at: float | None = None

    async def __call__(self) -> None:
        if self.awaited_at is None:
            self.awaited_at = time.monotonic()
        async with asyncio.timeout(30):
            await self.opened.wait()


async def held_then_opened(events, gate: Gate, marker: str, asked, mark: str) -> list:  # type: ignore[no-untyped-def]
    """Runs the turn; while ``gate`` holds, the agent's process runs and its model is not
    asked; then it is opened and the turn ends with its verdict."""
    collected: list = []

    async def collect() -> None:
        async for event in events:
            collected.append(event)

    running = asyncio.create_task(collect())
    async with asyncio.timeout(30):
        while gate.awaited_at is None or not matching(mark):
            await asyncio.sleep(0.05)
    await asyncio.sleep(HELD_S)
    assert asked(marker) == [], "the model heard of the task before ready returned"
    assert matching(mark), "the agent's process runs meanwhile"
    gate.opened.set()
    async with asyncio.timeout(60):
        await running
    return collected


async def test_claude_starts_and_waits_for_its_prompt(claude_bin, agent_env, anthropic, workdir):
    anthropic.script("MARK-GATE", [{"text": "gated answer"}])
    gate = Gate()
    events = ClaudeExecutor(claude_bin, agent_env).run(
        claude_spec("MARK-GATE go", workdir), Scripted(), ready=gate
    )
    done = await held_then_opened(events, gate, "MARK-GATE", anthropic.requests_for, "claude")
    assert isinstance(done[-1], TurnFinished) and done[-1].result_text == "gated answer"


async def test_codex_starts_and_waits_for_its_prompt(codex_bin, codex_env, openai, workdir):
    openai.script("MARK-CGATE", [{"text": "gated codex answer"}])
    gate = Gate()
    events = CodexExecutor(codex_bin, codex_env).run(
        codex_spec("MARK-CGATE go", workdir), Scripted(), ready=gate
    )
    done = await held_then_opened(events, gate, "MARK-CGATE", openai.requests_for, "app-server")
    assert isinstance(done[-1], TurnFinished) and done[-1].result_text == "gated codex answer"


class StartingUp(FakeEngine):
    """An agent whose start-up changes a file before it has its prompt (as a hook or a
    planted fsmonitor of its CLI would); notes what the transcript holds when its prompt is
    released."""

    def __init__(self, store_of) -> None:  # type: ignore[no-untyped-def]
        super().__init__((ToolCalled("t1", "Write", "notes.txt"), *finished("seen")))
        self._store_of = store_of
        self.seen: list[str] = []

    async def run(self, spec, approver, steering=None, ready=None):  # type: ignore[no-untyped-def]
        assert ready is not None
        (spec.cwd / "started.txt").write_text("written at the agent's start\n")
        await ready()
        lines = await self._store_of().transcript.tail(spec.task_id)
        self.seen = [line.kind for line in lines]
        async for event in super().run(spec, approver, steering):
            yield event


async def test_the_repository_is_read_before_the_agent_starts(tmp_path, workdir):
    """In a repository: what the agent's process does from its first moment, before its
    prompt, is the turn's doing (on the card), never taken for the owner's; the turn's first
    transcript lines are written when the agent gets its prompt."""
    for git in (("init", "-q"), ("commit", "-q", "--allow-empty", "-m", "start")):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@l", *git], cwd=workdir, check=True
        )
    (workdir / "owners.txt").write_text("the owner's own edit\n")
    holder: list = []
    engine = StartingUp(lambda: holder[0].store)
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        async with running_bot(settings, {}, {"claude": engine}) as app:
            holder.append(app)
            await fake.user_message("/claude mode=ask look around", OWNER)
            card = await fake.wait_text(OWNER, "seen", timeout_s=30)
            task = (await app.store.tasks.list_for(OWNER, None, 1))[0]
            assert task.status is TaskStatus.DONE
    text = card.params["text"]
    assert "started.txt" in text, text  # the agent's start is the turn's
    assert "owners.txt" not in text, text  # what was there before is not
    assert engine.seen == ["Baseline"], engine.seen  # a first turn's prompt is its goal
