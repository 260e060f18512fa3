"""No secret value reaches the phone, the board or the store: a running task's progress line and
approval card, a check's output (stored, on the card, on the board, fed back to the agent),
a worktree's patch shown inline, the stall watchdog's stored message, and transcript lines
stored before redaction existed, read back."""

from __future__ import annotations

import html
import json
import logging
import re
from pathlib import Path

import aiohttp
import sqlalchemy as sa

from bot.events import (
    ApprovalRequest,
    SessionStarted,
    TextEmitted,
    ToolCalled,
    TurnFinished,
    Usage,
)
from bot.models import TaskStatus, TurnSpec
from bot.redaction import REDACTED, Redactor
from bot.store import Store
from bot.store.schema import stall_notices, task_checks
from bot.store.stalls import StallNotice
from bot.telegram.callbacks import TaskAction
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import TOKEN, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_store import new
from tests.test_worktrees import make_repo

SESSION = "0f0e0d0c-0b0a-4908-8706-050403020188"
API_KEY = "sk-ant-api03-redaction-test-value"
ENVIRON = {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": API_KEY}
LINK = re.compile(r"(http://[^\s<\"]+/signin\?t=[\w.=-]+)")
CUT_AT = 12  # characters of the token a shortened progress line would show
QUOTED = "s3cr'et\"pw-Zq9"  # a database password with both quotes


def test_a_value_is_redacted_whole_escaped_and_where_a_line_was_cut():
    redact = Redactor.of([TOKEN, API_KEY, "short"])
    assert redact(f"a {API_KEY} b") == f"a {REDACTED} b"
    assert redact({"k": [f"x{TOKEN}"]}) == {"k": [f"x{REDACTED}"]}
    assert redact(f"cut {API_KEY[:10]}…") == f"cut {REDACTED}…"
    assert redact(f"{API_KEY[-9:]} and") == f"{REDACTED} and"
    assert redact(f"…{API_KEY[-9:]} and") == f"…{REDACTED} and"
    assert redact(f"ends {API_KEY[:9]}") == f"ends {REDACTED}"
    assert redact(f"ok {API_KEY[:7]}… short") == f"ok {API_KEY[:7]}… short"  # too short to tell
    assert Redactor.of(["p&ss-w0rd<x"])("a p&amp;ss-w0rd&lt;x") == f"a {REDACTED}"
    assert redact.document(f"{API_KEY}\n".encode()) == f"{REDACTED}\n".encode()
    assert redact.document(b"\xff" + API_KEY.encode()).endswith(API_KEY.encode())  # not text


def test_a_value_with_quotes_is_redacted_as_html_and_json_escape_it():
    """As a message shows it (quotes escaped or not) and inside a JSON string (``\\"``)."""
    redact = Redactor.of([QUOTED])
    for form in (QUOTED, html.escape(QUOTED), html.escape(QUOTED, quote=False)):
        assert redact(f"pw {form} end") == f"pw {REDACTED} end", form
    assert redact(json.dumps({"cmd": f"psql -W {QUOTED}"})) == f'{{"cmd": "psql -W {REDACTED}"}}'
    assert Redactor.of(["plain-value-1"]).secrets == ("plain-value-1",)  # no form twice
    # an approval card: the tool's input as JSON, escaped as HTML (``&`` needs both)
    amp = 'Sm"tp&Pass-2024'
    card = html.escape(json.dumps({"password": amp}))
    assert amp not in Redactor.of([amp])(card) and "Pass-2024" not in Redactor.of([amp])(card)


def shown(fake: FakeTelegram) -> list[str]:
    """Every text the fake Bot API received: messages, edits, captions."""
    return [
        str(c.params.get("text") or c.params.get("caption") or "")
        for c in fake.calls
        if c.method in ("sendMessage", "editMessageText", "sendDocument")
    ]


def leaks(texts: list[str]) -> list[str]:
    """The texts holding a secret or a part of one a cut left."""
    parts = (API_KEY, TOKEN, API_KEY[:CUT_AT], TOKEN[:CUT_AT], API_KEY[-CUT_AT:])
    return [t for t in texts if any(p in t for p in parts)]


def tool_calls(spec: TurnSpec) -> tuple:
    """An agent that names secrets as it works: in a line it says, in a command (whose
    progress line is cut in the middle of the token), and in a command it asks to run; the
    progress line shows the command while the approval waits."""
    command = f"curl -H 'Authorization: Bearer {API_KEY}' "
    pad = "x" * (200 - 1 - len(f"Bash: {command}") - CUT_AT)  # the token's head at the cut
    return (
        SessionStarted(SESSION, "fake-model"),
        TextEmitted(f"I will use the key {API_KEY}"),
        ToolCalled("t1", "Bash", f"{command}{pad}{TOKEN} more"),
        ApprovalRequest("Bash", {"command": f"echo {TOKEN}"}, "t2", f"Bash(echo {TOKEN})"),
        TurnFinished(False, "done", SESSION, 0.01, Usage(1, 1)),
    )


async def signed_in(fake: FakeTelegram) -> tuple[aiohttp.ClientSession, str]:
    """A board client signed in through /board in the fake chat, and the board's address."""
    after = len(fake.calls)
    await fake.user_message("/board", OWNER)
    call = await fake.wait_text(OWNER, "signin?t=", after=after)
    link = LINK.search(call.params["text"])
    assert link is not None, call.params["text"]
    jar = aiohttp.CookieJar(unsafe=True)
    http = aiohttp.ClientSession(cookie_jar=jar, timeout=aiohttp.ClientTimeout(total=20))
    async with http.get(link.group(1), allow_redirects=False) as response:
        assert response.status == 303
    return http, link.group(1).split("/signin")[0]


async def test_a_running_tasks_progress_and_approval_card_show_no_secret(tmp_path: Path):
    """A tool call, a line and an approval naming the bot token and an API key: the progress
    message, its edits and the approval card show ``[redacted]`` (also where the progress
    line cut a command in the middle of the token); the board's pending question too."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            "claude",
            workdir,
            progress_delay_s=0,
            progress_interval_s=0.1,
            board_port=0,
        )
        async with running_bot(settings, ENVIRON, {"claude": FakeEngine(tool_calls)}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude mode=ask use the keys", OWNER)
            card = await fake.wait_text(OWNER, "echo [redacted]")
            line = await fake.wait_shown(OWNER, "x" * 20)  # the progress line with the command
            stored = await app.store.questions.pending_of([1])
            http, board = await signed_in(fake)
            async with http, http.get(f"{board}/api/tasks/1") as response:
                page = await response.json()
            deny = [
                b["callback_data"]
                for row in card.params["reply_markup"]["inline_keyboard"]
                for b in row
                if "Deny" in b["text"]
            ]
            await fake.press(OWNER, card.result["message_id"], deny[0], OWNER)
            await fake.wait_shown(OWNER, "done")
            texts = shown(fake)
    progress = line.params["text"]
    assert f"Bearer {REDACTED}" in progress and f"x{REDACTED}…" in progress, progress
    assert f"key {REDACTED}" in progress, progress
    assert not leaks(texts), leaks(texts)
    assert not leaks([json.dumps(q.payload) for q in stored]) and stored
    assert page["pending"] and not leaks([json.dumps(page)])
    assert f"echo {REDACTED}" in page["pending"][0]["text"]


def checked(spec: TurnSpec) -> tuple:
    return (
        SessionStarted(SESSION, "fake-model"),
        TurnFinished(False, f"round for: {spec.prompt[:40]}", SESSION, 0.01, Usage(1, 1)),
    )


async def test_a_checks_output_is_redacted_stored_shown_and_fed_back(tmp_path: Path):
    """A check that prints the API key (from a file: its environment has none): ``[redacted]``
    in the stored check runs, on the card and its output file, on the board's API, and in the
    next round's prompt the agent gets."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    (workdir / "key.txt").write_text(f"key={API_KEY}\n")
    engine = FakeEngine(checked)
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, "claude", workdir, board_port=0, check_rounds=2
        )
        async with running_bot(settings, ENVIRON, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message('/claude check="cat key.txt; exit 1" mode=readonly go', OWNER)
            await fake.wait_call("sendDocument")
            await fake.wait_shown(OWNER, "#1")
            async with app.store.engine.connect() as conn:
                rows = [r.output for r in await conn.execute(sa.select(task_checks.c.output))]
            task = await app.store.tasks.get(1)
            http, board = await signed_in(fake)
            async with http, http.get(f"{board}/api/tasks/1") as response:
                page = await response.json()
            files = [data.decode() for data in fake.files.values()]
            texts = shown(fake)
    assert task is not None and task.status is TaskStatus.CHECK_FAILED
    assert len(rows) == 2 and all(f"key={REDACTED}" in r for r in rows), rows
    assert [c["output"] for c in page["checks"]] == rows
    assert len(engine.specs) == 2 and f"key={REDACTED}" in engine.specs[1].prompt
    assert API_KEY not in engine.specs[1].prompt
    assert any(f"key={REDACTED}" in f for f in files), files  # the failed check's output
    assert not leaks([*texts, *files, json.dumps(page)])


async def test_transcript_lines_stored_before_redaction_are_read_redacted(tmp_path: Path):
    """Rows written without the redactor (an older bot) hold the value; every reader of the
    store (board, MCP, /transcript, `detach show`) gets it redacted."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'old.db'}"
    old = await Store.open(url)
    task = 1
    await old.transcript.append(task, 1, [("ToolCalled", {"summary": f"curl {API_KEY}"})])
    await old.close()
    store = await Store.open(url, redact=Redactor.of([API_KEY]))
    try:
        (line,) = await store.transcript.after(task, 0)
        (tail,) = await store.transcript.tail(task)
        async with store.engine.connect() as conn:
            raw = (await conn.execute(sa.text("SELECT body FROM transcript_events"))).scalar_one()
    finally:
        await store.close()
    assert API_KEY in raw  # nothing rewrote the old row
    assert line.body == tail.body == {"summary": f"curl {REDACTED}"}


async def test_a_running_bot_logs_no_secret(tmp_path: Path, caplog):
    """A line an engine logs with agent-made text (a notification of unexpected shape naming
    a key) and a traceback holding one: written redacted by the root's handlers while the
    bot runs."""
    caplog.set_level(logging.INFO)
    workdir = tmp_path / "work"
    workdir.mkdir()
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        async with running_bot(settings, ENVIRON, {"claude": FakeEngine(())}):
            await fake.wait_call("setMyCommands")
            engine_log = logging.getLogger("executors.codex")
            engine_log.warning("codex: skipped a notification: %.200s", f"curl -H {API_KEY}")
            try:
                raise ValueError(f"bad token {TOKEN}")
            except ValueError:
                engine_log.exception("it failed")
            logged = caplog.text  # (the fake Bot API's own access log names the token)
    assert f"curl -H {REDACTED}" in logged and f"bad token {REDACTED}" in logged
    assert not leaks([logged]), logged


def wrote_the_password(spec: TurnSpec) -> tuple:
    """An agent that puts the password, quotes and all, in a file of its worktree."""
    (Path(spec.cwd) / "settings.ini").write_text(f"password = {QUOTED}\n")
    return (
        SessionStarted(SESSION, "fake-model"),
        TurnFinished(False, "wrote settings.ini", SESSION, 0.01, Usage(1, 1)),
    )


async def test_a_worktrees_patch_shown_inline_holds_no_secret(tmp_path: Path):
    """Show diff on a worktree whose patch holds a password with quotes: the message shows
    ``[redacted]``, in no escaped form the password (HTML escapes its quotes there)."""
    workdir = tmp_path / "work"
    make_repo(workdir / "repo")
    diff = TaskAction(action="diff", task_id=1).pack()
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        environ = {**ENVIRON, "DB_PASSWORD": QUOTED}
        async with running_bot(settings, environ, {"claude": FakeEngine(wrote_the_password)}):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude worktree=yes cwd=repo write it", OWNER)
            card = await fake.wait_call("sendMessage", lambda c: diff in json.dumps(c.params))
            after = len(fake.calls)
            await fake.press(OWNER, card.result["message_id"], diff, OWNER)
            shown_diff = await fake.wait_text(OWNER, "settings.ini", after=after)
    text = shown_diff.params["text"]
    assert f"+password = {REDACTED}" in text, text
    assert not [f for f in ("s3cr", "pw-Zq9") if f in text], text


async def test_the_stall_watchdogs_stored_message_is_redacted(tmp_path: Path):
    """The message naming the tool command an agent waits on is stored redacted."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'db'}"
    store = await Store.open(url, redact=Redactor.of([API_KEY]))
    try:
        _, turn = await store.tasks.create(new(), "t")
        await store.stalls.spoke(StallNotice(turn.id, 1, 10, f"Bash: curl -H {API_KEY}"))
        async with store.engine.connect() as conn:
            raw = (await conn.execute(sa.select(stall_notices.c.text))).scalar_one()
        notice = await store.stalls.get(turn.id)
    finally:
        await store.close()
    assert raw == f"Bash: curl -H {REDACTED}"
    assert notice is not None and notice.text == raw
