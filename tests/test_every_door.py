"""One table, every door (issue #52's "Must be shown"): the same cases through the chat (text, a
document with a caption, a voice draft), the board, the Mini App, `detach add`, `detach mcp`, a
task file in the inbox and an ``/at`` schedule, against ONE real bot (the fake Bot API, the
real claude CLI against the scripted model, a local preflight judge), compared by what the
owner sees: messages and their buttons in Telegram, the board's JSON, what a process printed.

``TABLE`` says, for each case, which doors it goes through and why the others are absent; a
case runs its doors at once, each with its own marker, so the module stays within a minute and
a half on a loaded 2-core machine. Doors are driven from outside only (tests/support/doors.py):
the test holds while the use cases behind them are rearranged."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.support.anthropic_mock import AnthropicMock
from tests.support.chat_mock import ChatMock
from tests.support.doors import STARTS, WAIT_S, Bench, buttons, process_env, signed_in, until
from tests.support.fake_telegram import TOKEN, Call, FakeTelegram
from tests.support.harness import OWNER, in_own_task, make_settings, running_bot
from tests.support.stt_server import SttServer

pytestmark = pytest.mark.asyncio(loop_scope="module")

DOORS = (
    "chat",
    "chat_file",
    "voice",
    "board",
    "mini_app",
    "detach_add",
    "mcp",
    "task_file",
    "schedule",
)
STARTERS = ("chat", "chat_file", "voice", "detach_add", "mcp", "task_file", "schedule")
ANSWERERS = ("chat", "board", "mini_app")  # where an approval, a question, a hold is answered
NO_START = "the board and the Mini App start no task; they show the hold and Drop it here"
ONLY_STARTS = "it only starts tasks: {what} is answered where it is shown"
WHY_NOT_ANSWER = {
    "chat_file": "a file is a task's input, not an answer",
    "voice": "a voice note is a draft of a task or a follow-up, never an answer to a button",
    "detach_add": "it only starts tasks",
    "mcp": "`detach mcp` has no answer tool: the owner answers, not the calling agent",
    "task_file": "it only starts tasks",
    "schedule": "it only starts tasks",
}
FOLLOWERS = ("chat", "board", "mini_app", "mcp")
WHY_NOT_FOLLOW = {
    "chat_file": "a file as a reply continues a task as a reply does (tests/test_afterlife.py)",
    "voice": "a voice note continues a task only in its forum topic (topics on): "
    "tests/test_followup_doors.py drives it; this bench is a plain private chat",
    "detach_add": "it starts tasks; it continues none",
    "task_file": "a task file starts a task; it continues none",
    "schedule": "a schedule starts a task; it continues none",
}
MERGERS = ("chat", "board", "mini_app")
WHY_NOT_MERGE = {
    **{d: WHY_NOT_ANSWER[d] for d in ("chat_file", "voice", "detach_add", "task_file")},
    "schedule": "it only starts tasks",
    "mcp": "`detach mcp` has no merge or discard: the owner decides what lands",
}

# case -> door -> None (the case goes through that door) or why it does not
TABLE: dict[str, dict[str, str | None]] = {
    "held": {d: None if d in STARTERS else NO_START for d in DOORS},
    "question": {d: None if d in ANSWERERS else WHY_NOT_ANSWER[d] for d in DOORS},
    "approval": {d: None if d in ANSWERERS else WHY_NOT_ANSWER[d] for d in DOORS},
    "followup": {d: None if d in FOLLOWERS else WHY_NOT_FOLLOW[d] for d in DOORS},
    "cancel": {
        d: None if d in FOLLOWERS else WHY_NOT_FOLLOW.get(d, WHY_NOT_ANSWER.get(d)) for d in DOORS
    },
    "merge": {d: None if d in MERGERS else WHY_NOT_MERGE[d] for d in DOORS},
    "discard": {d: None if d in MERGERS else WHY_NOT_MERGE[d] for d in DOORS},
    "archive": {
        d: None if d == "chat" else "`/archive all` is the chat's: no other door archives"
        for d in DOORS
    },
}


def through(case: str) -> tuple[str, ...]:
    return tuple(d for d, why in TABLE[case].items() if why is None)


def mark(case: str, door: str) -> str:
    """A row's marker: no row's is part of another's (the model's scripts are found by it)."""
    return f"MK-{case}-{door}-".upper().replace("_", "")


async def each(rows: dict[str, Awaitable[Any]]) -> dict[str, Any]:
    """The rows at once; every row that failed is named with its door."""
    doors = list(rows)
    results = await asyncio.gather(*rows.values(), return_exceptions=True)
    failed = {d: r for d, r in zip(doors, results, strict=True) if isinstance(r, BaseException)}
    if failed:
        lines = "\n".join(f"  {d}: {type(e).__name__}: {e}" for d, e in failed.items())
        raise AssertionError(f"{len(failed)} door(s) failed:\n{lines}") from next(
            iter(failed.values())
        )
    return dict(zip(doors, results, strict=True))


async def sent(bench: Bench, *needles: str, after: int = 0) -> Call:
    """The first message the bot sent the owner that says every one of ``needles``."""
    return await bench.fake.wait_call(
        "sendMessage",
        lambda c: int(c.params["chat_id"]) == OWNER and all(n in c.params["text"] for n in needles),
        WAIT_S,
        after,
    )


# -- the bench: one bot for the module ---------------------------------------------------------

PREFLIGHT = "You are the preflight of an unattended coding agent"
REASON = "It would delete every backup."
CHOICES = ["▶️ Start anyway", "🗑 Drop"]


def repository(path: Path) -> None:
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    (path / "README").write_text("hello\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], check=True)


@asynccontextmanager
async def bench_at(root: Path, claude_bin: str) -> AsyncIterator[Bench]:
    anthropic, judge = AnthropicMock().start(), ChatMock().start()
    judge.script("MK-HELD-", [{"text": json.dumps({"verdict": "refuse", "reason": REASON})}])
    judge.script(PREFLIGHT, [{"text": json.dumps({"verdict": "go"})}])
    workdir, data_dir, home = root / "work", root / "data", root / "home"
    workdir.mkdir()
    repository(workdir)
    config = root / "detach.toml"
    config.write_text(
        f'[presets.judge]\nengine = "local"\nmodel = "m"\nbase_url = "{judge.base_url}"\n'
    )
    agent_env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        **anthropic.env(),
    }
    home.mkdir()
    try:
        async with SttServer() as stt, FakeTelegram() as fake:
            settings = make_settings(
                data_dir, fake, claude_bin, workdir,
                preflight=True, preflight_model="judge", config=config, board_port=0,
                stt_base_url=stt.base_url, stt_api_key="sk-test-voice",
                max_concurrent_turns=8,
            )  # fmt: skip
            async with running_bot(settings, agent_env):
                await fake.wait_call("setMyCommands")
                env = process_env(data_dir, workdir, root / "tools-home")
                bench = Bench(fake, anthropic, stt, data_dir, workdir, env, TOKEN)
                async with signed_in(bench):
                    yield bench
    finally:
        anthropic.stop()
        judge.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def bench(tmp_path_factory: pytest.TempPathFactory, claude_bin: str) -> AsyncIterator[Bench]:
    root = tmp_path_factory.mktemp("doors")
    async with in_own_task(lambda: bench_at(root, claude_bin)) as built:
        yield built


# -- the table ---------------------------------------------------------------------------------


def test_the_table_says_for_every_case_and_door_whether_it_goes_through_and_why_not():
    for case, row in TABLE.items():
        assert tuple(row) == DOORS, case
        for door, why in row.items():
            assert why is None or len(why) > 10, (case, door)
        assert through(case), case
    assert set(TABLE) == {n.removeprefix("case_") for n in globals() if n.startswith("case_")}
    held_or_started = set(through("held")) | {"board", "mini_app"}
    assert held_or_started == set(DOORS)  # every door is shown the hold, or starts it


async def case_held(bench: Bench) -> None:
    """A refusal holds the task whichever door started it: its message offers Start anyway and
    Drop; it waits in /pending, /tasks, the board and the Mini App; nothing runs; Drop (from
    the chat, the board or the Mini App, in turn) starts nothing."""
    doors = through("held")
    goals = {d: f"{mark('held', d)} wipe the build cache and every backup" for d in doors}

    async def refused(door: str) -> Call:
        await STARTS[door](bench, goals[door])
        return await sent(bench, mark("held", door), f"Not started: {REASON}")

    refusals = await each({d: refused(d) for d in doors})
    for door, refusal in refusals.items():
        assert refusal.params["text"].startswith("⏸ held by its preflight"), door
        assert list(buttons(refusal)) == CHOICES, door

    at = len(bench.fake.calls)
    await bench.fake.user_message("/pending", OWNER)
    listed = (await bench.shown("/tasks", "Your tasks")).params["text"]
    for door, refusal in refusals.items():
        copy = await sent(bench, mark("held", door), "Not started:", after=at)
        assert buttons(copy) == buttons(refusal), door  # the same desk answers it
        assert f"⏸ <i>{goals[door]}" in listed, door
        for surface in (bench.board, bench.mini_app):
            assert surface is not None
            row = await surface.row(mark("held", door))
            assert row["wait_text"] == "held by its preflight", (door, row)
            assert [c["text"] for c in row["choices"]] == CHOICES, door
            assert row["text"] == refusal.params["text"], door  # the chat's words, as they are

    async def dropped(n: int, door: str) -> None:
        by = ANSWERERS[n % len(ANSWERERS)]
        if by == "chat":
            assert await bench.press(refusals[door], CHOICES[1]) == "Dropped: not started"
        else:
            surface = bench.board if by == "board" else bench.mini_app
            assert surface is not None
            row = await surface.row(mark("held", door))
            drop = next(c["choice"] for c in row["choices"] if c["text"] == CHOICES[1])
            answer = await surface.post(f"/api/holds/{row['hold']}", {"choice": drop})
            assert answer["text"] == "Dropped: not started", (door, by)
        await until(lambda: bench.buttons_now(refusals[door]) == [])

    await each({d: dropped(n, d) for n, d in enumerate(doors)})
    assert bench.board is not None
    titles = [r["title"] for r in (await bench.board.get("/api/tasks"))["tasks"]]
    for door in doors:
        assert not any(mark("held", door) in t for t in titles), door
        assert bench.anthropic.requests_for(mark("held", door)) == [], door  # nothing ran
    for door in ("detach_add", "mcp"):  # the caller is told why, and no number
        assert "held by the bot's preflight" in bench.said[door], bench.said[door]
        assert REASON in bench.said[door], door
    assert bench.said["detach_add"].startswith("exit 1") and bench.said["mcp"].startswith("error")
    [held] = (bench.inbox / "held").glob("*mk-held-taskfile*.md")
    assert REASON in held.with_name(held.name + ".reason.txt").read_text()


Case = Callable[[Bench], Awaitable[None]]


@pytest.mark.parametrize("case", list(TABLE))
async def test_every_door(case: str, bench: Bench) -> None:
    run: Case | None = globals().get(f"case_{case}")
    if run is None:
        pytest.skip(f"{case}: not built yet")
    await asyncio.wait_for(run(bench), 120)
