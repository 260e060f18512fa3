"""Hand-off between the phone and a terminal, with the real claude CLI against the scripted model:
the card's command (shell-quoted: a hostile directory stays a name), 🖥 To terminal around a
terminal ``claude --resume`` of the same session, 📱 Take back after which a reply carries what
the terminal added, and ``/adopt`` / ``detach adopt`` of a session a plain ``claude -p`` made."""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
import json
import os
import re
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.events import Usage
from bot.models import ApprovalMode, Task, TaskKind, TaskStatus
from bot.money.presets import PresetCatalog
from bot.money.pricing import Meter, PriceList
from bot.telegram.render import money
from bot.telegram.terminal import terminal_command
from executors import registry
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked


def _priced(engine: str, model: str | None, input_tokens: int, output_tokens: int) -> float:
    """What the built-in price table makes of these tokens of ``model``."""
    meter = Meter(
        PriceList(PresetCatalog.load(None, registry.builtin_presets()).all()), engine, None
    )
    meter.named(model)
    cost = meter.charge(Usage(input_tokens, output_tokens)).cost_usd
    assert cost is not None
    return cost


OTHER = 222  # another allowed user: not the task's owner
HOSTILE = "my dir; touch PWNED1 $(touch PWNED2) `touch PWNED3` 'q' \"d\" & touch PWNED4"


def _task(cwd: str, engine: str = "claude", session: str | None = None) -> Task:
    now = datetime.now(UTC)
    return Task(
        id=3, owner_id=OWNER, chat_id=OWNER, engine=engine, kind=TaskKind.SESSION, slug="x",
        title="x", cwd=cwd, model=None, status=TaskStatus.DONE, session_id=session,
        locale="en", created_at=now, updated_at=now, announced=True,
        approval_mode=ApprovalMode.ASK,
    )  # fmt: skip


def test_the_terminal_command_keeps_a_hostile_directory_a_name(tmp_path):
    """Pasted into a real shell, the command enters the directory and runs the CLI with the
    session id: none of the directory's `;`, `$()`, backticks, quotes or `&` runs anything."""
    where = tmp_path / HOSTILE
    where.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("claude", "codex"):  # stand-ins that say where they ran and with what
        stub = bin_dir / name
        stub.write_text('#!/bin/sh\npwd > "$OUT"; printf "%s\\n" "$@" >> "$OUT"\n')
        stub.chmod(0o755)
    session = str(uuid.uuid4())
    for engine, argv in (("claude", ["--resume", session]), ("codex", ["resume", session])):
        command = terminal_command(_task(str(where), engine, session))
        assert command is not None and command.startswith("cd '")
        out = tmp_path / f"{engine}.out"
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OUT": str(out)}
        subprocess.run(["bash", "-c", command], cwd=tmp_path, env=env, check=True, timeout=10)
        assert out.read_text().splitlines() == [str(where), *argv]
    assert not list(tmp_path.rglob("PWNED*"))
    assert terminal_command(_task(str(where), "local", session)) is None  # no terminal CLI
    assert terminal_command(_task(str(where), "claude", None)) is None  # no session yet


async def _refused_tap(fake: FakeTelegram, after: int) -> None:
    await fake.wait_call(
        "answerCallbackQuery", lambda c: "No task #1 of yours" in c.params.get("text", ""),
        after=after,
    )  # fmt: skip


def _buttons(call) -> dict[str, str]:
    return {
        b["text"]: b["callback_data"]
        for row in call.params["reply_markup"]["inline_keyboard"]
        for b in row
        if "callback_data" in b
    }


def _command_on(call) -> str:
    """The terminal command a message shows (its <code>, unescaped)."""
    found = re.search(r"At the terminal: <code>(.*?)</code>", call.params["text"], re.S)
    assert found, call.params["text"]
    return html.unescape(found.group(1))


async def _claude_at_terminal(
    claude_bin: str, env: dict[str, str], cwd: Path, *args: str
) -> dict[str, object]:
    """The CLI as a person runs it at the terminal (``-p``, JSON out), bounded."""
    proc = await asyncio.create_subprocess_exec(
        claude_bin, "-p", *args, "--output-format", "json",
        cwd=cwd, env={**env, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return json.loads(out)


async def test_hold_at_the_terminal_and_take_back(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-HOFF", [{"text": "phone first"}, *[{"echo": True}] * 3])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, allowed_users=frozenset({OWNER, OTHER})
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude MARK-HOFF start here", OWNER)
            card = await fake.wait_text(OWNER, "phone first", timeout_s=60)
            task = await app.store.tasks.get(1)
            assert task.session_id
            command = _command_on(card)
            assert command == f"cd {workdir} && claude --resume {task.session_id}"
            card_id = card.result["message_id"]
            await wait_linked(app, OWNER, card_id)

            # only the owner holds it (another allowed user is told there is no such task)
            mark = len(fake.calls)
            await fake.press(OWNER, card_id, _buttons(card)["🖥 To terminal"], OTHER)
            await _refused_tap(fake, mark)
            assert await app.store.terminal.get(task.id) is None

            mark = len(fake.calls)
            await fake.press(OWNER, card_id, _buttons(card)["🖥 To terminal"], OWNER)
            held = await fake.wait_text(OWNER, "is at the terminal since", after=mark)
            assert _command_on(held) == command and "📱 Take back" in _buttons(held)
            assert (await app.store.terminal.get(task.id)).user_id == OWNER

            # a reply while held: one line with Take back; nothing runs, nothing is queued
            mark = len(fake.calls)
            requests = len(anthropic.requests_for("MARK-HOFF"))
            await fake.user_message("PHONE-WHILE-HELD", OWNER, reply_to_message_id=card_id)
            refused = await fake.wait_text(OWNER, "held at the terminal since", after=mark)
            assert "not run" in refused.params["text"]
            assert {"📱 Take back", "📱 Take back and send it"} <= set(_buttons(refused))
            assert len(await app.store.tasks.turns_of(task.id)) == 1
            mark = len(fake.calls)
            await fake.user_message("SECOND-WHILE-HELD", OWNER, reply_to_message_id=card_id)
            second = await fake.wait_text(OWNER, "held at the terminal since", after=mark)
            assert len(await app.store.tasks.turns_of(task.id)) == 1
            # the Follow up button too (nothing to send: Take back only)
            mark = len(fake.calls)
            await fake.press(OWNER, card_id, _buttons(card)["↪️ Follow up"], OWNER)
            line = await fake.wait_text(OWNER, "held at the terminal since", after=mark)
            assert "Take back, then send it again" in line.params["text"]
            assert list(_buttons(line)) == ["📱 Take back"]

            # at the terminal: the same session, in the task's directory
            said = await _claude_at_terminal(
                claude_bin, agent_env, workdir, "TERMINAL-WORDS from the laptop",
                f"--resume={task.session_id}",
            )  # fmt: skip
            assert said["session_id"] == task.session_id
            assert len(anthropic.requests_for("MARK-HOFF")) == requests + 1

            take_back = _buttons(held)["📱 Take back"]
            mark = len(fake.calls)
            await fake.press(OWNER, held.result["message_id"], take_back, OTHER)
            await _refused_tap(fake, mark)
            assert await app.store.terminal.get(task.id) is not None

            # Take back and send it: the refused reply runs now, after the terminal's turn
            mark = len(fake.calls)
            send = _buttons(refused)["📱 Take back and send it"]
            await fake.press(OWNER, refused.result["message_id"], send, OWNER)
            back = await fake.wait_shown(OWNER, "is back on the phone", after=mark)
            assert back.method == "editMessageText"
            assert int(back.params["message_id"]) == held.result["message_id"]
            assert not (back.params.get("reply_markup") or {}).get("inline_keyboard")
            assert await app.store.terminal.get(task.id) is None
            lines = [line.kind for line in await app.store.transcript.tail(task.id, 5)]
            assert "AtTerminal" in lines
            echo = await fake.wait_text(OWNER, "ECHO", timeout_s=60, after=mark)
            assert "PHONE-WHILE-HELD" in echo.params["text"]
            # every reply refused during the hold runs, in the order they were sent
            echo = await fake.wait_text(OWNER, "SECOND-WHILE-HELD", timeout_s=60, after=mark)
            history = json.dumps(anthropic.requests_for("MARK-HOFF")[-1]["messages"])
            assert "TERMINAL-WORDS" in history
            assert history.index("TERMINAL-WORDS") < history.index("PHONE-WHILE-HELD")
            assert history.index("PHONE-WHILE-HELD") < history.index("SECOND-WHILE-HELD")
            # the second refusal's own button then says it went already
            mark = len(fake.calls)
            late = _buttons(second)["📱 Take back and send it"]
            await fake.press(OWNER, second.result["message_id"], late, OWNER)
            await fake.wait_call(
                "answerCallbackQuery",
                lambda c: "was sent to it already" in c.params.get("text", ""),
                after=mark,
            )
            # and a plain reply goes on from there
            await wait_linked(app, OWNER, echo.result["message_id"])
            mark = len(fake.calls)
            await fake.user_message("PHONE-AGAIN", OWNER, reply_to_message_id=card_id)
            again = await fake.wait_text(OWNER, "ECHO", timeout_s=60, after=mark)
            assert "PHONE-AGAIN" in again.params["text"]
            assert "TERMINAL-WORDS" in json.dumps(anthropic.requests_for("MARK-HOFF")[-1])

            # a Take back left from the ended hold never ends a later hold
            await wait_linked(app, OWNER, again.result["message_id"])
            mark = len(fake.calls)
            hold_again = _buttons(again)["🖥 To terminal"]
            await fake.press(OWNER, again.result["message_id"], hold_again, OWNER)
            await fake.wait_text(OWNER, "is at the terminal since", after=mark)
            mark = len(fake.calls)
            await fake.press(OWNER, held.result["message_id"], take_back, OWNER)
            await fake.wait_call(
                "answerCallbackQuery",
                lambda c: "is not held at the terminal" in c.params.get("text", ""),
                after=mark,
            )
            assert await app.store.terminal.get(task.id) is not None


async def test_adopt_a_terminal_session_and_continue_it(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-ADOPT",
        [
            {
                "text": "answered at the terminal",
                "usage": {"input_tokens": 4000, "output_tokens": 300},
            },
            {"echo": True, "delay": 2},
        ],
    )
    anthropic.script("MARK-SHELL-ADOPT", [{"text": "shell session answer"}, {"echo": True}])
    anthropic.script("MARK-OUTSIDE", [{"text": "outside"}])
    outside = tmp_path / "outside"
    outside.mkdir()
    made = await _claude_at_terminal(claude_bin, agent_env, workdir, "MARK-ADOPT hello there")
    session = str(made["session_id"])
    away = await _claude_at_terminal(claude_bin, agent_env, outside, "MARK-OUTSIDE hi")
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, agent_env) as app:
            refusals = [
                ("/adopt not-a-session", "is not a session id"),
                ("/adopt ../../etc/passwd", "is not a session id"),
                (f"/adopt {uuid.uuid4()}", "No Claude Code session or Codex thread"),
                (f"/adopt {away['session_id']}", "outside"),
            ]
            for text, needle in refusals:
                mark = len(fake.calls)
                await fake.user_message(text, OWNER)
                await fake.wait_text(OWNER, needle, after=mark)
            assert await app.store.tasks.get(1) is None

            await fake.user_message(f"/adopt {session}", OWNER)
            card = await fake.wait_text(OWNER, "answered at the terminal", timeout_s=20)
            task = await app.store.tasks.get(1)
            assert task.session_id == session and task.cwd == str(workdir)
            assert task.status is TaskStatus.DONE and task.engine == "claude"
            assert _command_on(card) == f"cd {workdir} && claude --resume {session}"
            ran = (await app.store.tasks.last_turn(1)).model  # what the session file names
            assert ran and ran in card.params["text"].split("\n")[0]
            assert "cost n/a" not in card.params["text"] and "· –" not in card.params["text"]
            # its cost: the file's tokens at this bot's price of the model the file names
            turn = await app.store.tasks.last_turn(1)
            assert (turn.input_tokens, turn.output_tokens) == (4000, 300)
            assert turn.cost_usd == pytest.approx(_priced("claude", turn.model, 4000, 300))
            assert turn.cost_usd > 0 and not turn.unpriced
            assert f"{turn.model} · ${money(turn.cost_usd)}" in card.params["text"].split("\n")[0]
            mark = len(fake.calls)
            await fake.user_message(f"/adopt {session}", OWNER)
            await fake.wait_text(OWNER, "is task #1 already", after=mark)
            mark = len(fake.calls)
            await fake.user_message("/result 1", OWNER)  # the card again, with the command
            again = await fake.wait_text(OWNER, "answered at the terminal", after=mark)
            assert _command_on(again) == _command_on(card)

            await wait_linked(app, OWNER, card.result["message_id"])
            mark = len(fake.calls)
            await fake.user_message(
                "ADOPTED-REPLY", OWNER, reply_to_message_id=card.result["message_id"]
            )
            # its turn runs: the card's 🖥 To terminal (gone from the card; a stale copy) refuses
            async with asyncio.timeout(30):
                while (await app.store.tasks.get(1)).status is not TaskStatus.RUNNING:
                    await asyncio.sleep(0.05)
            await fake.press(
                OWNER, card.result["message_id"], _buttons(card)["🖥 To terminal"], OWNER
            )
            busy = "has a turn running or queued"
            await fake.wait_call(
                "answerCallbackQuery", lambda c: busy in c.params.get("text", ""), after=mark
            )
            echo = await fake.wait_text(OWNER, "ECHO", timeout_s=60, after=mark)
            assert "ADOPTED-REPLY" in echo.params["text"]
            assert await app.store.terminal.get(1) is None
            last = anthropic.requests_for("MARK-ADOPT")[-1]
            assert "answered at the terminal" in json.dumps(last["messages"])

            # from a shell: `detach adopt` prints the task; the running bot sends its card
            shell_made = await _claude_at_terminal(
                claude_bin, agent_env, workdir, "MARK-SHELL-ADOPT hello"
            )
            env = {
                **os.environ,
                "HOME": agent_env["HOME"],
                "DETACH_DATA_DIR": str(settings.data_dir),
                "DETACH_ALLOWED_USERS": str(OWNER),
                "DETACH_WORKDIR": str(workdir),
            }
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "adopt", str(shell_made["session_id"]),
                "--cwd", str(workdir), cwd=workdir, env=env, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 0 and out.decode().startswith("#2 ")
            await fake.wait_text(OWNER, "shell session answer", timeout_s=20)
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "adopt", "nope",
                cwd=workdir, env=env, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            _, err = await asyncio.wait_for(proc.communicate(), 30)
            assert proc.returncode == 1 and b"is not a session id" in err


async def test_adopt_a_codex_thread_and_continue_it(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, openai, workdir
):
    openai.script("MARK-CXA", [{"text": "codex said hi"}, {"echo": True}])
    proc = await asyncio.create_subprocess_exec(
        codex_bin, "exec", "--json", "--skip-git-repo-check", "MARK-CXA hello",
        cwd=workdir, env=codex_env, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    thread = json.loads(out.decode().splitlines()[0])["thread_id"]
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin)
        async with running_bot(settings, {**agent_env, **codex_env}) as app:
            await fake.user_message(f"/adopt {thread}", OWNER)
            card = await fake.wait_text(OWNER, "codex said hi", timeout_s=20)
            assert _command_on(card) == f"cd {workdir} && codex resume {thread}"
            task = await app.store.tasks.get(1)
            assert task.engine == "codex" and task.session_id == thread
            assert task.title == "MARK-CXA hello"
            turn = await app.store.tasks.last_turn(1)
            ran = turn.model  # the rollout's turn_context
            assert ran and ran in card.params["text"].split("\n")[0]
            # the rollout's token total, priced: the scripted model's 100 in, 10 out
            assert (turn.input_tokens, turn.output_tokens) == (100, 10)
            assert turn.cost_usd == pytest.approx(_priced("codex", ran, 100, 10))
            assert f"{ran} · ${money(turn.cost_usd)}" in card.params["text"].split("\n")[0]
            await wait_linked(app, OWNER, card.result["message_id"])
            mark = len(fake.calls)
            await fake.user_message(
                "CODEX-REPLY", OWNER, reply_to_message_id=card.result["message_id"]
            )
            echo = await fake.wait_text(OWNER, "ECHO", timeout_s=60, after=mark)
            assert "CODEX-REPLY" in echo.params["text"]
            assert "codex said hi" in json.dumps(openai.requests_for("MARK-CXA")[-1]["input"])


def test_session_files_are_read_as_hostile_input(tmp_path):
    """A malformed id never reaches the file system; a file that claims another directory than
    the folder it is kept in is marked inconsistent; junk lines are skipped; a huge file is
    read only at its ends."""
    from executors.sessions import claude_dir_name, find_session, valid_id

    assert valid_id("../../etc/passwd") is None and valid_id("") is None
    assert valid_id("-" + str(uuid.uuid4())) is None
    good = str(uuid.uuid4())
    assert valid_id(good) == good and valid_id(good.upper()) == good  # the canonical form
    assert valid_id("{" + good + "}") is None and valid_id(f"urn:uuid:{good}") is None
    home = tmp_path / "home"
    env = {"HOME": str(home)}
    real = tmp_path / "proj"
    folder = home / ".claude" / "projects" / claude_dir_name(str(real))
    folder.mkdir(parents=True)
    lines = [
        "not json",
        json.dumps([1, 2]),
        json.dumps({"type": "user", "cwd": str(real), "message": {"content": "FIRST"}}),
        "x" * 300_000,  # past the bounded head read: never parsed
        json.dumps(
            {"type": "assistant", "message": {"content": [{"type": "text", "text": "LAST"}]}}
        ),
    ]
    (folder / f"{good}.jsonl").write_text("\n".join(lines) + "\n")
    found = find_session(env, good)
    assert found is not None and found.consistent
    assert (found.engine, found.cwd, found.first_prompt, found.last_answer) == (
        "claude", str(real), "FIRST", "LAST",
    )  # fmt: skip
    liar = str(uuid.uuid4())
    claim = {"type": "user", "cwd": "/etc", "message": {"content": "x"}}
    (folder / f"{liar}.jsonl").write_text(json.dumps(claim) + "\n")
    assert not find_session(env, liar).consistent
    assert find_session(env, str(uuid.uuid4())) is None
    # a FIFO planted as a Codex rollout is never opened for reading (it would block forever)
    fifo_id = str(uuid.uuid4())
    day = home / ".codex" / "sessions" / "2026" / "12" / "05"
    day.mkdir(parents=True)
    os.mkfifo(day / f"rollout-2026-12-05T10-00-00-{fifo_id}.jsonl")
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        assert pool.submit(find_session, env, fifo_id).result(timeout=5) is None
    finally:
        pool.shutdown(wait=False)  # a thread blocked on the FIFO must not hold the test


def test_an_adopted_session_never_runs_in_auto():
    """A session started elsewhere may have read anything: adopted, its next turn asks first
    even where the chat's sessions run in ``auto``; narrower defaults stay."""
    from bot.models import ApprovalMode
    from bot.tasks.adoption import adopted_mode

    assert adopted_mode(ApprovalMode.AUTO) is ApprovalMode.ASK
    for mode in (ApprovalMode.ASK, ApprovalMode.SANDBOX, ApprovalMode.READONLY):
        assert adopted_mode(mode) is mode
