"""Routing never lowers how strongly a task is held (issue #51): a task moves only to an engine
that holds its mode at least as strongly as its own (``executors.registry.may_move``), through
every router — the preflight's route (``engine=auto``, DETACH_DEFAULT_ENGINE=auto), and the
usage-limit hand-over (the notice's buttons, and a forged tap). The table below is the decision
itself, written out (docs/security.md, "Routing"), not derived from the registry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.events import LimitReached, SessionStarted, TurnFinished, Usage
from bot.models import ApprovalMode, NewTask, Preset, TaskKind, TaskStatus
from bot.tasks.planning import TaskDefaults
from bot.tasks.routing import TaskRouter
from bot.telegram.callbacks import TaskAction, run_on
from bot.turns.queue import TurnQueue
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.support.postgres import opened_store
from tests.test_approvals_e2e import buttons

ENGINES = ("claude", "codex", "local")
EVERY_MOVE = {(a, b) for a in ENGINES for b in ENGINES if a != b}
ALLOWED = {
    # Codex: everything in its sandbox; /local: commands without network; Claude: commands
    # reaching the allow-listed hosts. File tools of the latter two: in-process rules.
    ApprovalMode.SANDBOX: {("claude", "codex"), ("claude", "local"), ("local", "codex")},
    # Codex: its commands in a read-only OS sandbox; Claude and /local: their own rules
    ApprovalMode.READONLY: {
        ("claude", "codex"),
        ("claude", "local"),
        ("local", "claude"),
        ("local", "codex"),
    },
    ApprovalMode.ASK: EVERY_MOVE,  # every command and edit waits for the owner's tap
    ApprovalMode.AUTO: EVERY_MOVE,  # the owner's rights, wherever it runs
}


async def test_the_preflights_route_moves_a_task_only_to_an_engine_as_strong(tmp_path):
    """``engine=auto`` and DETACH_DEFAULT_ENGINE=auto both take the preflight's suggestion
    through ``TaskRouter.target`` (here with a real queue on a real SQLite store): every
    (engine, target, mode) of the table."""
    defaults = TaskDefaults(
        engine="claude",
        max_prompt_chars=1000,
        sandbox_problem=lambda _: None,  # the sandbox works everywhere: strength alone decides
        subtask_engines=frozenset(ENGINES),
    )
    wrong = []
    async with opened_store("sqlite", tmp_path) as store:
        router = TaskRouter(TurnQueue(store, None), defaults)  # type: ignore[arg-type]
        for mode, allowed in ALLOWED.items():
            for engine, to in sorted(EVERY_MOVE):
                new = NewTask(
                    OWNER, OWNER, engine, TaskKind.DETACH, "fix it", Path("/w"), approval_mode=mode
                )
                target = await router.target(new, Preset("cheap", to, "m", price_input=0.1))
                if (target is not None) != ((engine, to) in allowed):
                    wrong.append((str(mode), engine, to, target is not None))
    assert wrong == []


MODES = [ApprovalMode.SANDBOX, ApprovalMode.READONLY, ApprovalMode.ASK, ApprovalMode.AUTO]


@pytest.mark.parametrize("mode", MODES, ids=str)
@pytest.mark.parametrize("engine", ENGINES)
async def test_the_hand_over_offers_and_takes_only_an_engine_as_strong(
    tmp_path, workdir, engine, mode
):
    """A task whose engine meets its usage limit: the notice offers exactly the engines the
    table allows, and a forged tap for any other is refused; the task stays where it was."""
    engines = {name: FakeEngine(_limited() if name == engine else (), name) for name in ENGINES}
    offered = {to for (a, to) in ALLOWED[mode] if a == engine}
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        async with running_bot(settings, {}, engines) as app:
            await fake.user_message(f"/{engine} mode={mode} MARK tidy the readme", OWNER)
            notice = await fake.wait_text(OWNER, "usage limit", timeout_s=20)
            shown = {
                b.removeprefix("▶️ Run on ").removesuffix(" now").lower() for b in buttons(notice)
            }
            assert shown - {"⏳ wait", "cancel"} == offered
            for to in sorted(set(ENGINES) - offered - {engine}):
                mark = len(fake.calls)
                forged = TaskAction(task_id=1, action=run_on(to)).pack()
                await fake.press(OWNER, notice.result["message_id"], forged, OWNER)
                await fake.wait_call(
                    "answerCallbackQuery",
                    lambda c: "less strictly" in c.params.get("text", ""),
                    after=mark,
                )
            task = await app.store.tasks.get(1)
            assert task.engine == engine and task.status is TaskStatus.WAITING_FOR_LIMIT


def _limited() -> tuple[object, ...]:
    reset = datetime.now(UTC) + timedelta(hours=2)
    stopped = TurnFinished(
        is_error=True, result_text="limit", session_id="s1", cost_usd=None, usage=Usage()
    )
    return (SessionStarted("s1", "m"), LimitReached(reset, "five_hour"), stopped)
