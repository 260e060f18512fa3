"""One table, every door (issue #52's "Must be shown"): the same cases through the chat (text, a
document with a caption, a voice draft), the board, the Mini App, `detach add`, `detach mcp`, a
task file in the inbox and an ``/at`` schedule, against ONE real bot (the fake Bot API, the
real claude CLI against the scripted model, a local preflight judge, the scripted Managed
Agents API), compared by what the owner sees: messages and their buttons in Telegram, the
board's JSON, what a process printed.

``TABLE`` says, for each case, which doors it goes through and why the others are absent; a
case runs its doors at once, each with its own marker, so the module stays within a minute and
a half on a loaded 2-core machine. Doors are driven from outside only (tests/support/doors.py):
the test holds while the use cases behind them are rearranged. A failure names each door that
failed; with DOORS_DUMP=<file> it also writes what the owner was shown and the model asked."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from bot.models import NewTask, TaskKind, TaskStatus
from bot.store import Store, TurnOutcome
from tests.support.anthropic_mock import AnthropicMock
from tests.support.chat_mock import ChatMock
from tests.support.doors import STARTS, WAIT_S, Bench, buttons, process_env, signed_in, until
from tests.support.fake_forum import FakeForum
from tests.support.fake_telegram import TOKEN, Call
from tests.support.harness import OWNER, in_own_task, make_settings, running_bot
from tests.support.managed_mock import ManagedMock
from tests.support.stt_server import Answer, SttServer

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
GO = None  # the case goes through this door
STARTS_ONLY = "it only starts tasks: it answers, continues or decides nothing"
NOT_AN_ANSWER = "a file sent is a task's input (as a reply: a follow-up), never an answer"
VOICE_NO_ANSWER = "a voice note becomes a draft of a task or a follow-up, never an answer"
NO_MCP_ANSWER = "`detach mcp` has no answer tool: the owner answers, not the calling agent"
NO_MCP_LANDING = "`detach mcp` has no merge or discard: the owner decides what lands"
PAGE_STARTS_NONE = "the board and the Mini App start no task; this case Drops holds from both"
FILE_FOLLOWS = "a file as a reply is a reply with an attachment: the chat row covers its road"
VOICE_NO_LANDING = "a voice note merges and discards nothing (its follow-up: the followup case)"
NO_CANCEL = "no voice or file cancels; Cancel is the chat's button or /cancel"
CHAT_ONLY = "`/archive all` is the chat's command (the shell's `detach archive` is no door here)"
VOICE_NO_OPTIONS = "a voice note's words are all goal: options such as cwd= are typed"
PAGES_START_NONE = "the board and the Mini App start no task, so they place none"

# case -> door -> GO (the case goes through that door) or why it does not
TABLE: dict[str, dict[str, str | None]] = {
    "held": {
        "chat": GO, "chat_file": GO, "voice": GO, "board": PAGE_STARTS_NONE,
        "mini_app": PAGE_STARTS_NONE, "detach_add": GO, "mcp": GO, "task_file": GO,
        "schedule": GO,
    },
    "question": {
        "chat": GO, "chat_file": NOT_AN_ANSWER, "voice": VOICE_NO_ANSWER, "board": GO,
        "mini_app": GO, "detach_add": STARTS_ONLY, "mcp": NO_MCP_ANSWER,
        "task_file": STARTS_ONLY, "schedule": STARTS_ONLY,
    },
    "approval": {
        "chat": GO, "chat_file": NOT_AN_ANSWER, "voice": VOICE_NO_ANSWER, "board": GO,
        "mini_app": GO, "detach_add": STARTS_ONLY, "mcp": NO_MCP_ANSWER,
        "task_file": STARTS_ONLY, "schedule": STARTS_ONLY,
    },
    "followup": {
        "chat": GO, "chat_file": FILE_FOLLOWS, "voice": GO, "board": GO, "mini_app": GO,
        "detach_add": STARTS_ONLY, "mcp": GO, "task_file": STARTS_ONLY, "schedule": STARTS_ONLY,
    },
    "cancel": {
        "chat": GO, "chat_file": NO_CANCEL, "voice": NO_CANCEL, "board": GO, "mini_app": GO,
        "detach_add": STARTS_ONLY, "mcp": GO, "task_file": STARTS_ONLY, "schedule": STARTS_ONLY,
    },
    "merge": {
        "chat": GO, "chat_file": FILE_FOLLOWS, "voice": VOICE_NO_LANDING, "board": GO,
        "mini_app": GO, "detach_add": STARTS_ONLY, "mcp": NO_MCP_LANDING,
        "task_file": STARTS_ONLY, "schedule": STARTS_ONLY,
    },
    "discard": {
        "chat": GO, "chat_file": FILE_FOLLOWS, "voice": VOICE_NO_LANDING, "board": GO,
        "mini_app": GO, "detach_add": STARTS_ONLY, "mcp": NO_MCP_LANDING,
        "task_file": STARTS_ONLY, "schedule": STARTS_ONLY,
    },
    "project": {
        "chat": GO, "chat_file": GO, "voice": VOICE_NO_OPTIONS, "board": PAGES_START_NONE,
        "mini_app": PAGES_START_NONE, "detach_add": GO, "mcp": GO, "task_file": GO,
        "schedule": GO,
    },
    "host": {
        "chat": GO, "chat_file": GO, "voice": VOICE_NO_OPTIONS, "board": PAGES_START_NONE,
        "mini_app": PAGES_START_NONE, "detach_add": GO, "mcp": GO, "task_file": GO,
        "schedule": GO,
    },
    "subtasks": {
        "chat": GO, "chat_file": GO, "voice": VOICE_NO_OPTIONS, "board": PAGES_START_NONE,
        "mini_app": PAGES_START_NONE, "detach_add": GO, "mcp": GO, "task_file": GO,
        "schedule": GO,
    },
    "managed": {
        "chat": GO, "chat_file": GO, "voice": VOICE_NO_OPTIONS, "board": PAGES_START_NONE,
        "mini_app": PAGES_START_NONE, "detach_add": GO, "mcp": GO, "task_file": GO,
        "schedule": GO,
    },
    "archive": {d: GO if d == "chat" else CHAT_ONLY for d in DOORS},
}  # fmt: skip


def through(case: str) -> tuple[str, ...]:
    return tuple(d for d, why in TABLE[case].items() if why is None)


ANSWERERS = through("approval")  # where a hold, an approval or a question is answered


def mark(case: str, door: str) -> str:
    """A row's marker: no row's is part of another's (the model's scripts are found by it)."""
    return f"{door}-{case}-MK-".upper().replace("_", "")


def slug(case: str, door: str) -> str:
    """What of the marker the task's label (three words, 24 characters at most) keeps."""
    return mark(case, door).lower().rstrip("-")[:14]


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
    judge.script("-HELD-MK-", [{"text": json.dumps({"verdict": "refuse", "reason": REASON})}])
    judge.script(PREFLIGHT, [{"text": json.dumps({"verdict": "go"})}])
    workdir, data_dir, home = root / "work", root / "data", root / "home"
    workdir.mkdir()
    project = workdir / "site-checkout"  # the project ``site``: a plain folder, no worktree
    project.mkdir()
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
        async with (
            SttServer() as stt,
            FakeForum(private_topics=True) as fake,
            ManagedMock() as remote,
        ):
            settings = make_settings(
                data_dir, fake, claude_bin, workdir,
                preflight=True, preflight_model="judge", config=config, board_port=0,
                stt_base_url=stt.base_url, stt_api_key="sk-test-voice",
                max_concurrent_turns=8, projects=(("site", project),),
                managed_api_key=remote.api_key, managed_base_url=remote.base_url,
            )  # fmt: skip
            async with running_bot(settings, agent_env):
                await fake.wait_call("setMyCommands")
                env = process_env(data_dir, workdir, root / "tools-home")
                env["DETACH_PROJECTS"] = f"site={project}"
                env["DETACH_MANAGED_API_KEY"] = remote.api_key
                env["DETACH_MANAGED_BASE_URL"] = remote.base_url
                bench = Bench(fake, anthropic, stt, data_dir, workdir, env, TOKEN, project)
                bench.remote = remote
                bench.database_url = settings.resolved_database_url
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
    [held] = (bench.inbox / "held").glob("*taskfile-held-mk*.md")
    assert REASON in held.with_name(held.name + ".reason.txt").read_text()


def touch(name: str) -> dict[str, Any]:
    return {"tool_use": {"name": "Bash", "input": {"command": f"touch {name}", "description": "d"}}}


def asks_color() -> dict[str, Any]:
    option = [{"label": "Red", "description": ""}, {"label": "Blue", "description": ""}]
    ask = {"question": "Which color?", "header": "Color", "multiSelect": False, "options": option}
    return {"tool_use": {"name": "AskUserQuestion", "input": {"questions": [ask]}}}


async def row_of(bench: Bench, marker: str, where: Callable[[dict[str, Any]], bool]) -> dict:
    """The board's row of the task ``marker`` names, once ``where`` holds for it."""
    assert bench.board is not None
    async with asyncio.timeout(WAIT_S):
        while True:
            rows = (await bench.board.get("/api/tasks"))["tasks"]
            found = [r for r in rows if marker in r["title"]]
            if found and where(found[0]):
                return found[0]
            await asyncio.sleep(0.1)


async def answered(bench: Bench, door: str, ask: Call, marker: str, **answer: Any) -> str:
    """The owner answers what ``ask`` asks from ``door``: its button in the chat (``button``),
    or the page's answer (``answer``/``option``) on the board or in the Mini App; the toast."""
    button = answer.pop("button")
    if door == "chat":
        return await bench.press(ask, button)
    surface = bench.board if door == "board" else bench.mini_app
    assert surface is not None
    row = await row_of(bench, marker, lambda r: r["wait"] is not None)
    page = await surface.get(f"/api/tasks/{row['id']}")
    [pending] = page["pending"]
    return str(
        (await surface.post(f"/api/tasks/{row['id']}/answer", {"qid": pending["id"], **answer}))[
            "text"
        ]
    )


async def case_approval(bench: Bench) -> None:
    """A tool call waits for the owner's approval: the chat's message offers Allow, Deny and
    Always; the board and the Mini App list it as waiting for approval with the same command;
    an Allow from any of them lets the turn go on, and the chat's message says so, without
    buttons."""
    doors = through("approval")

    async def one(door: str) -> None:
        marker, name = mark("approval", door), f"ok-{door}.txt"
        bench.anthropic.script(marker, [touch(name), {"text": f"{marker} made it"}])
        await bench.fake.user_message(f"/claude mode=ask {marker} make a file", OWNER)
        ask = await sent(bench, "wants to use", f"touch {name}")
        assert set(buttons(ask)) == {"✅ Allow", "⛔ Deny", "♾ Always…"}, door
        row = await row_of(bench, marker, lambda r: r["wait"] is not None)
        assert (row["badge"], row["wait_text"]) == ("approval", "waiting for your approval")
        for surface in (bench.board, bench.mini_app):  # the same request on both pages
            assert surface is not None
            [pending] = (await surface.get(f"/api/tasks/{row['id']}"))["pending"]
            assert f"touch {name}" in pending["text"], (door, pending)
        toast = await answered(bench, door, ask, marker, button="✅ Allow", answer="allow")
        assert toast == "Allowed.", (door, toast)
        await until(lambda: "Allowed" in bench.text_now(ask) and bench.buttons_now(ask) == [])
        await sent(bench, "· done", f"{marker} made it")
        assert Path(row["cwd"], name).exists()

    await each({d: one(d) for d in doors})


async def case_question(bench: Bench) -> None:
    """The agent asks a question: its options are the chat message's buttons and the board's
    and the Mini App's choices; a pick from any of them is the answer the agent gets."""
    doors = through("question")

    async def one(door: str) -> None:
        marker = mark("question", door)
        bench.anthropic.script(marker, [asks_color(), {"echo": True}])
        await bench.fake.user_message(f"/claude mode=ask {marker} ask me", OWNER)
        # the question's own words: a progress line sent meanwhile names the step, and so
        # "Which color?" too (under load the turn took its 5 s to ask)
        ask = await sent(bench, "asks: <b>Color</b>", "Which color?", slug("question", door))
        assert {"Red", "Blue"} <= set(buttons(ask)), door
        row = await row_of(bench, marker, lambda r: r["wait"] is not None)
        assert row["wait_text"] == "waiting for your answer", row
        for surface in (bench.board, bench.mini_app):  # the same question and options
            assert surface is not None
            [pending] = (await surface.get(f"/api/tasks/{row['id']}"))["pending"]
            assert "Which color?" in pending["text"], (door, pending)
            assert pending["options"][:2] == ["Red", "Blue"], (door, pending)
        await answered(bench, door, ask, marker, button="Blue", option=1)
        await until(lambda: bench.buttons_now(ask) == [])
        done = await sent(bench, "· done", "ECHO", slug("question", door))
        assert '"Which color?"="Blue"' in done.params["text"], door

    await each({d: one(d) for d in doors})


def bash(command: str) -> dict[str, Any]:
    return {"text": "working", "tool_use": {"name": "Bash", "input": {"command": command}}}


async def started(
    bench: Bench, marker: str, words: str, command: str = "/claude mode=auto"
) -> dict:
    """A task started in the chat, once its agent has asked the model: its board row."""
    await bench.fake.user_message(f"{command} {marker} {words}", OWNER)
    await until(lambda: bool(bench.anthropic.requests_for(marker)))
    return await row_of(bench, marker, lambda r: r["active"])


async def followed(bench: Bench, door: str, row: dict, prompt: str, steer: bool) -> Call:
    """A follow-up from ``door`` while the task's turn runs, into it (``steer``) or after it;
    its acknowledgement in the chat."""
    label = row["label"].split()[-1] if " " in row["label"] else row["label"]
    at = len(bench.fake.calls)
    if door in ("chat", "voice"):
        first = await sent(bench, label)  # the task's acknowledgement, in the task's topic
        topic = int(first.params["message_thread_id"])
        if door == "chat":  # the owner replies to it
            reply_to = first.result["message_id"]
            await bench.fake.user_message(
                prompt, OWNER, reply_to_message_id=reply_to, thread_id=topic
            )
        else:  # a voice note in the topic: its draft, then Start
            async with bench.voice:
                bench.stt.answers.append(Answer(text=prompt))
                await bench.fake.user_voice(b"OggS-more", OWNER, duration_s=2, thread_id=topic)
                draft = await sent(bench, f"🎤 {prompt}", after=at)
            await bench.press(draft, "▶️ Start")
        offer = await sent(bench, label, "into it: Steer now", after=at)
        await bench.press(offer, "➡️ Steer now" if steer else "Queue")
        return offer
    if door == "mcp":
        error, text = await bench.tool("followup", task_id=row["id"], prompt=prompt, steer=steer)
        assert not error and json.loads(text)["steer"] == ("asked" if steer else "queued"), text
        return await sent(bench, label, "(MCP)", after=at)
    surface = bench.board if door == "board" else bench.mini_app
    assert surface is not None
    done = await surface.post(
        f"/api/tasks/{row['id']}/followup", {"prompt": prompt, "steer": steer}
    )
    assert (done["steer"], done["behind"]) == ("sent" if steer else "queued", True), done
    return await sent(bench, label, "follow-up from the board", after=at)


async def settled(bench: Bench, ack: Call, needle: str) -> str:
    """A follow-up's acknowledgement once it says ``needle`` and offers nothing more."""
    await until(lambda: needle in bench.text_now(ack) and bench.buttons_now(ack) == [])
    return bench.text_now(ack)


async def case_followup(bench: Bench) -> None:
    """While a turn runs, a follow-up from any door is offered Steer now or Queue as a reply
    is: the steered words go into the running turn (the model reads them at its next step),
    the queued ones run next as a turn of their own; both are in the transcript, and each
    acknowledgement in the chat settles saying where its words went."""
    doors = through("followup")

    async def one(door: str) -> None:
        marker = mark("followup", door)
        steer, queue = f"STEER-{door} also say banana", f"QUEUE-{door} then this"
        bench.anthropic.script(
            marker, [bash("sleep 10; echo one"), {"text": f"{marker} first"}, {"echo": True}]
        )
        row = await started(bench, marker, "work a while")
        steered = await followed(bench, door, row, steer, steer=True)
        queued = await followed(bench, door, row, queue, steer=False)
        await settled(bench, steered, "taken into the running turn at step")
        await settled(bench, queued, "✅ done")
        echo = await sent(bench, "· done", "ECHO", slug("followup", door))
        assert queue in echo.params["text"] and steer not in echo.params["text"], door
        first, *_ = [
            r for r in bench.anthropic.requests_for(marker) if steer in json.dumps(r["messages"])
        ]  # the steer went into the first turn, at its next step
        assert first["roles"].count("assistant") == 1, door
        assert bench.board is not None
        items = (await bench.board.get(f"/api/tasks/{row['id']}/transcript"))["items"]
        said = [(i["text"], bool(i.get("steered"))) for i in items if i["kind"] == "said"]
        assert said == [(steer, True), (queue, False)], (door, said)

    await each({d: one(d) for d in doors})


async def case_cancel(bench: Bench) -> None:
    """A running task is cancelled from the chat (/cancel), the board, the Mini App or `detach
    mcp`: its turn stops (the tool it ran never finishes), the chat's card says cancelled and
    the board lists it so."""
    doors = through("cancel")

    async def one(door: str) -> None:
        marker, name = mark("cancel", door), f"never-{door}.txt"
        bench.anthropic.script(marker, [bash(f"sleep 20; touch {name}"), {"text": "never"}])
        row = await started(bench, marker, "wait long")
        await asyncio.sleep(0.5)  # the tool has started
        if door == "chat":
            await bench.fake.user_message(f"/cancel {row['id']}", OWNER)
        elif door == "mcp":
            error, text = await bench.tool("cancel", task_id=row["id"])
            assert not error, text
        else:
            surface = bench.board if door == "board" else bench.mini_app
            assert surface is not None
            assert (await surface.post(f"/api/tasks/{row['id']}/cancel"))["ok"] is True
        done = await row_of(bench, marker, lambda r: r["status"] == "cancelled")
        assert done["status_text"] == "cancelled", done
        await bench.fake.wait_shown(OWNER, f"{slug('cancel', door)}", WAIT_S)
        await until(
            lambda: any(
                slug("cancel", door) in m.get("text", "") and "· cancelled" in m.get("text", "")
                for m in bench.fake.bot_messages(OWNER)
            )
        )
        assert not Path(row["cwd"], name).exists(), door

    await each({d: one(d) for d in doors})


def wrote(path: str, n: str) -> dict[str, Any]:
    command = f"printf '{n}\\n' > {path} && echo wrote"
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "d"}}}


async def worked(bench: Bench, case: str, door: str) -> tuple[Call, dict]:
    """A /detach task in a repository of its own: its first turn's card (offering Merge and
    Discard) and its board row, once its worktree holds that turn's file. One repository per
    row. Several tasks at once in one repository share its ``.git``, and Claude Code 2.1.197's
    sandbox lists ``.git/config.lock`` among the paths it keeps from a command's writes: while
    one task's sandboxed command runs, that file is there, and another task's command started
    then fails at times ("bwrap: Can't find source path .../.git/config.lock") once it is gone
    by the bind. Not a door's doing; reported, and kept out of this table."""
    marker = mark(case, door)
    one, two = f"{door}-{case}-one.txt", f"{door}-{case}-two.txt"
    bench.anthropic.script(
        marker,
        [
            wrote(one, "one"),
            {"text": f"{door} {case} wrote one"},
            wrote(two, "two"),
            {"text": f"{door} {case} wrote two"},
        ],
    )
    repo = bench.workdir / f"{door}-{case}"  # a repository each: see ``worked``'s docstring
    repo.mkdir()
    repository(repo)
    await bench.fake.user_message(f"/detach cwd={repo} {marker} write files", OWNER)
    card = await sent(bench, "· done", f"{door} {case} wrote one")
    assert {"🔀 Merge", "🗑 Discard"} <= set(buttons(card)), door
    row = await row_of(bench, marker, lambda r: r["worktree"] == "active" and not r["active"])
    assert Path(row["cwd"], one).exists(), door
    return card, row


async def went_on(bench: Bench, case: str, door: str, card: Call, row: dict) -> Path:
    """After a Merge or Discard, a follow-up from ``door`` goes on in the same session, in a
    worktree cut again at the same place: its directory."""
    marker, prompt = mark(case, door), f"now the second file of {door}"
    at = len(bench.fake.calls)
    if door == "chat":
        topic = int(card.params["message_thread_id"])
        reply_to = card.result["message_id"]
        await bench.fake.user_message(prompt, OWNER, reply_to_message_id=reply_to, thread_id=topic)
    else:
        surface = bench.board if door == "board" else bench.mini_app
        assert surface is not None
        done = await surface.post(f"/api/tasks/{row['id']}/followup", {"prompt": prompt})
        assert done["behind"] is False and done["text"] == "Sent: its turn starts now.", done
    await sent(bench, "a fresh worktree from", after=at)
    second = await sent(bench, "· done", f"{door} {case} wrote two", after=at)
    assert {"🔀 Merge", "🗑 Discard"} <= set(buttons(second)), door
    now = await row_of(bench, marker, lambda r: not r["active"])
    assert now["cwd"] == row["cwd"], door  # the terminal line stays true
    asked = [r for r in bench.anthropic.requests_for(marker) if prompt in r["last_user_text"]]
    assert len(asked) == 1 and asked[0]["roles"].count("assistant") == 2, door  # same session
    assert f"{door} {case} wrote one" in json.dumps(asked[0]["messages"]), door
    cwd = Path(row["cwd"])
    assert (cwd / f"{door}-{case}-two.txt").read_text() == "two\n", door
    return cwd


async def case_merge(bench: Bench) -> None:
    """Merge from the chat, the board or the Mini App: the chat's card and the board both say
    merged at once and offer Merge no more; a follow-up from the same door continues the same
    session in a worktree cut again at the same directory, from what was merged."""
    doors = through("merge")

    async def one(door: str) -> None:
        card, row = await worked(bench, "merge", door)
        if door == "chat":
            assert await bench.press(card, "🔀 Merge") == "Merged."
        else:
            surface = bench.board if door == "board" else bench.mini_app
            assert surface is not None
            assert await surface.post(f"/api/tasks/{row['id']}/merge") == {
                "ok": True,
                "text": "Merged.",
            }
        await until(lambda: "merged into" in bench.text_now(card))
        assert "🔀 Merge" not in bench.buttons_now(card), door
        merged = await row_of(bench, mark("merge", door), lambda r: r["worktree"] == "merged")
        assert not Path(merged["cwd"]).exists(), door
        assert (bench.workdir / f"{door}-merge" / f"{door}-merge-one.txt").exists(), door
        cwd = await went_on(bench, "merge", door, card, row)
        assert (cwd / f"{door}-merge-one.txt").exists(), door  # cut from what was merged

    await each({d: one(d) for d in doors})


async def case_discard(bench: Bench) -> None:
    """Discard from the chat (asked again: it has work), the board or the Mini App: the card
    says so; a follow-up continues the same session in a worktree cut again where the task
    started, without what was discarded."""
    doors = through("discard")

    async def one(door: str) -> None:
        card, row = await worked(bench, "discard", door)
        if door == "chat":
            at = len(bench.fake.calls)
            await bench.press(card, "🗑 Discard")
            asked = await sent(bench, "Discard it anyway?", after=at)
            assert await bench.press(asked, "⚠️ Discard anyway") == "Discarded."
        else:
            surface = bench.board if door == "board" else bench.mini_app
            assert surface is not None
            done = await surface.post(f"/api/tasks/{row['id']}/discard", {"confirmed": True})
            assert done == {"ok": True, "text": "Discarded."}, done
        await until(lambda: "worktree and branch removed" in bench.text_now(card))
        await row_of(bench, mark("discard", door), lambda r: r["worktree"] == "discarded")
        assert not Path(row["cwd"]).exists(), door
        cwd = await went_on(bench, "discard", door, card, row)
        assert not (cwd / f"{door}-discard-one.txt").exists(), door  # it stays discarded
        assert not (bench.workdir / f"{door}-discard" / f"{door}-discard-one.txt").exists()

    await each({d: one(d) for d in doors})


async def case_project(bench: Bench) -> None:
    """``cwd=project:site`` from every door that starts a task (each as it takes options: a
    command's ``key=value``, a flag's word, the MCP tool's ``cwd``, a task file's line): the
    task runs in the project's folder (DETACH_PROJECTS); a project no host has is refused
    with the ones there are, as that door answers."""
    doors = through("project")

    async def one(door: str) -> None:
        marker = mark("project", door)
        bench.anthropic.script(marker, [{"text": f"{marker} ran in the project"}])
        await STARTS[door](bench, f"{marker} say where", {"cwd": "project:site"})
        await sent(bench, "· done", f"{marker} ran in the project")
        row = await row_of(bench, marker, lambda r: not r["active"])
        assert Path(row["cwd"]) == bench.project, (door, row["cwd"])

    await each({d: one(d) for d in doors})

    async def refused(door: str) -> None:
        at = len(bench.fake.calls)
        await STARTS[door](bench, f"{mark('project', door)}X nowhere", {"cwd": "project:gone"})
        if door in ("detach_add", "mcp"):  # the caller is told
            assert "project called gone" in bench.said[door], (door, bench.said[door])
        else:
            await sent(bench, "No host has a project called <b>gone</b>", "site", after=at)

    await each({d: refused(d) for d in doors})


ONE_PROCESS = "there is no host to choose"


async def case_host(bench: Bench) -> None:
    """``host=gpu-box`` on a bot that runs every task itself (no shared database, so no other
    host): each door that starts a task refuses the pin and starts nothing. A command, `detach
    add`'s words and ``/at`` say there is no host to choose; a task file's ``host:`` is no key
    it has, and the MCP tool says it takes no host (it writes a task file; a sub-task runs on
    its parent's host)."""
    doors = through("host")

    async def refused(door: str) -> str:
        marker, at = mark("host", door), len(bench.fake.calls)
        await STARTS[door](bench, f"{marker} run there", {"host": "gpu-box"})
        if door in ("detach_add", "mcp"):
            return bench.said[door]
        needles = ("unknown key", "host") if door == "task_file" else (ONE_PROCESS,)
        return str((await sent(bench, *needles, after=at)).params["text"])

    said = await each({d: refused(d) for d in doors})
    assert said["detach_add"].startswith("exit 1") and ONE_PROCESS in said["detach_add"], said
    assert said["mcp"].startswith("error\nstart takes no host"), said
    for door in doors:
        assert bench.anthropic.requests_for(mark("host", door)) == [], door  # nothing ran


async def case_subtasks(bench: Bench) -> None:
    """``subtasks=yes`` from every door that starts a task and takes it: the acknowledgement
    says the task may start sub-tasks and its agent is given `detach mcp` (Claude Code lists
    its tools, or, while the server still starts, the tool that waits for it); the MCP tool
    takes no such argument and says so (what a task's agent starts is a sub-task)."""
    doors = [d for d in through("subtasks") if d != "mcp"]

    async def one(door: str) -> None:
        marker = mark("subtasks", door)
        bench.anthropic.script(marker, [{"text": f"{marker} may split"}])
        await STARTS[door](bench, f"{marker} split it", {"subtasks": "yes"})
        await sent(bench, slug("subtasks", door), "🧩 may start sub-tasks")
        await sent(bench, "· done", f"{marker} may split")
        [asked] = bench.anthropic.requests_for(marker)
        given = {"mcp__detach__start", "WaitForMcpServers"}  # its tools, or its start awaited
        assert given & set(asked["tools"]), (door, asked["tools"])

    await each({d: one(d) for d in doors})
    await STARTS["mcp"](bench, f"{mark('subtasks', 'mcp')} split it", {"subtasks": "yes"})
    assert bench.said["mcp"].startswith("error\nstart takes no subtasks"), bench.said["mcp"]


async def case_managed(bench: Bench) -> None:
    """``engine=managed`` from every door that starts a task (the option, `detach add`'s word,
    the MCP tool's engine, a task file's line): the task runs on the Managed Agents API (the
    scripted one), its acknowledgement says so and its card carries the remote answer."""
    doors = through("managed")
    remote = bench.remote
    assert remote is not None

    async def one(door: str) -> None:
        marker = mark("managed", door)
        remote.script(marker, [[{"text": f"{marker} ran remotely"}]])
        await STARTS[door](bench, f"{marker} look around", {"engine": "managed"})
        await sent(bench, slug("managed", door), "Managed Agents")
        await sent(bench, "· done", f"{marker} ran remotely")
        assert bench.anthropic.requests_for(marker) == [], door  # no local agent ran

    await each({d: one(d) for d in doors})


ARCHIVED = 50


async def case_archive(bench: Bench) -> None:
    """`/archive all` of 50 finished tasks (and those the cases above left) answers at once, in
    one transaction: the board lists none of them afterwards."""
    await seeded(bench.database_url, bench.workdir, ARCHIVED)
    at, began = len(bench.fake.calls), time.monotonic()
    await bench.fake.user_message("/archive all", OWNER)
    answer = await bench.fake.wait_text(OWNER, "Archived ", WAIT_S, after=at)
    took_s = answer.at - began
    count = int(re.search(r"Archived (\d+) tasks", answer.params["text"]).group(1))  # type: ignore[union-attr]
    # ~0.1 s alone; the 1-second bound of tests/test_archive_all.py once met 2.2 s in a loaded
    # whole run: that file holds the answer's order, this one a bound for a shared machine
    assert count >= ARCHIVED and took_s < 5.0, (count, took_s)
    assert bench.board is not None
    assert [r for r in (await bench.board.get("/api/tasks"))["tasks"] if not r["active"]] == []
    kept = (await bench.board.get("/api/tasks?archived=1"))["tasks"]
    assert len([r for r in kept if r["title"].startswith("seeded job")]) == ARCHIVED


async def seeded(url: str, workdir: Path, count: int) -> None:
    """``count`` finished tasks written by another connection to the bot's database."""
    store = await Store.open(url)
    try:
        for n in range(count):
            new = NewTask(OWNER, OWNER, "claude", TaskKind.DETACH, f"seeded job {n}", workdir)
            task, turn = await store.tasks.create(new, f"seeded-{n}")
            await store.tasks.finish_turn(turn, TurnOutcome(TaskStatus.DONE, result_text="ok"))
    finally:
        await store.close()


Case = Callable[[Bench], Awaitable[None]]


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("case", list(TABLE))
async def test_every_door(case: str, bench: Bench) -> None:
    run: Case | None = globals().get(f"case_{case}")
    if run is None:
        pytest.skip(f"{case}: not built yet")
    try:
        await asyncio.wait_for(run(bench), 120)
    except BaseException:
        dump(bench)
        raise


def dump(bench: Bench) -> None:
    """What the owner was shown and what the model was asked, into $DOORS_DUMP (debugging)."""
    import os

    if not os.environ.get("DOORS_DUMP"):
        return
    with open(os.environ["DOORS_DUMP"], "a") as out:
        for c in bench.fake.calls:
            if c.method.startswith(("send", "edit")):
                text = c.params.get("text", "")
                out.write(f"{c.method} {c.params.get('message_id', '')} {text!r} ")
                out.write(f"{list(buttons(c))} -> {c.ok} {str(c.result)[:80]}\n")
        for r in bench.anthropic.requests:
            out.write(f"REQ {r.get('roles')} {r.get('last_user_text', '')[-300:]!r}\n")
