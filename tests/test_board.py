"""The board over HTTP, against the real bot with the fake Bot API and a replayed engine: the
gate (no session, one-time links, CSRF, Mini App ``initData``), owners only, the live stream,
and an approval answered on the board like a tap in Telegram."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import pytest

from bot.app import App
from bot.board.auth import BoardAuth, Refused
from bot.board.command import board_link
from bot.board.server import Board
from bot.board.views import split_patch
from bot.events import (
    ApprovalRequest,
    SessionStarted,
    TextEmitted,
    ToolCalled,
    ToolFinished,
    TurnFinished,
    Usage,
)
from bot.models import TaskStatus, TurnSpec
from bot.settings import Settings
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import TOKEN
from tests.support.harness import app_in_own_task, wait_sent
from tests.support.recording_session import RecordingSession
from tests.test_handlers import OWNER, feed, message

OTHER = 222  # a second allowed user
SESSION = "0f0e0d0c-0b0a-4908-8706-050403020100"
LINK = re.compile(r"(http://[^\s<]+/signin\?t=[\w.=-]+)")


def finished(text: str) -> tuple:
    return (
        SessionStarted(SESSION, "fake-model"),
        TextEmitted(text),
        ToolCalled("t1", "Bash", "make test"),
        ToolFinished("t1", False, "42 passed"),
        TurnFinished(False, text, SESSION, 0.0123, Usage(10, 5)),
    )


def asks_first() -> tuple:
    return (
        SessionStarted(SESSION, "fake-model"),
        ApprovalRequest("Bash", {"command": "rm -rf build"}, "t1", "Bash(rm -rf build)"),
        TextEmitted("after the approval"),
        TurnFinished(False, "after the approval", SESSION, 0.01, Usage(1, 1)),
    )


def board_settings(tmp_path: Path, workdir: Path, **more: object) -> Settings:
    values: dict[str, object] = dict(
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER, OTHER}),
        data_dir=tmp_path / "data",
        workdir=workdir,
        outbox_chat_interval_s=0,
        board_port=0,
    )
    values.update(more)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@asynccontextmanager
async def bot_with_board(
    tmp_path: Path,
    workdir: Path,
    engine: FakeEngine,
    environ: dict[str, str] | None = None,
    **more: object,
) -> AsyncIterator[tuple[App, Board]]:
    settings = board_settings(tmp_path, workdir, **more)
    async with app_in_own_task(
        settings, session=RecordingSession(), executors={"claude": engine}, environ=environ
    ) as app:
        board = app.dispatcher["board"]
        assert isinstance(board, Board)
        yield app, board


def client() -> aiohttp.ClientSession:
    # the board is at 127.0.0.1: aiohttp's jar keeps cookies of an IP address only when unsafe
    return aiohttp.ClientSession(
        cookie_jar=aiohttp.CookieJar(unsafe=True), timeout=aiohttp.ClientTimeout(total=20)
    )


async def signed_in(app: App, board: Board, user: int = OWNER) -> tuple[aiohttp.ClientSession, str]:
    """A client signed in through /board in Telegram, and its CSRF token."""
    session = await feed(app, message("/board", user=user))
    link = LINK.search(session.new_texts())
    assert link is not None, session.new_texts()
    http = client()
    async with http.get(link.group(1), allow_redirects=False) as response:
        assert response.status == 303
        cookie = response.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age" in cookie
    async with http.get(f"{board.url}/api/me") as response:
        assert response.status == 200
        me = await response.json()
    assert me["user"] == user and me["texts"]["allow"] == "Allow"
    return http, me["csrf"]


async def wait_status(app: App, task_id: int, status: TaskStatus, timeout_s: float = 10) -> None:
    async with asyncio.timeout(timeout_s):
        while (await app.store.tasks.get(task_id)).status is not status:
            await asyncio.sleep(0.02)


async def test_nothing_answers_without_a_session(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        await feed(app, message("/claude build it"))
        await wait_status(app, 1, TaskStatus.DONE)
        async with client() as http:
            for path in ("/", "/tasks/1", "/api/tasks", "/api/tasks/1", "/api/stream"):
                async with http.get(board.url + path) as response:
                    assert response.status == 401, path
                    body = await response.text()
                    assert "build it" not in body
            async with http.get(f"{board.url}/api/tasks/1/stream") as response:
                assert response.status == 401
            ru = {"Accept-Language": "ru-RU,ru;q=0.9"}
            async with http.get(f"{board.url}/tasks/1", headers=ru) as response:
                assert response.status == 401 and "Войдите" in await response.text()
            async with http.post(f"{board.url}/api/tasks/1/cancel") as response:
                assert response.status == 401
            async with http.get(f"{board.url}/api/me", headers={"Authorization": "Bearer x"}) as r:
                assert r.status == 401
            async with http.get(f"{board.url}/static/board.js") as response:
                assert response.status == 200  # the shell's code holds nobody's data


async def test_a_sign_in_link_works_once_and_a_forged_one_never(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        session = await feed(app, message("/board"))
        link = LINK.search(session.new_texts()).group(1)
        async with client() as http:
            async with http.get(link, allow_redirects=False) as response:
                assert response.status == 303
            async with http.get(f"{board.url}/api/tasks") as response:
                assert response.status == 200
        async with client() as http:
            async with http.get(link, allow_redirects=False) as response:
                assert response.status == 403  # used once already
            body, _, signature = link.partition("?t=")[2].partition(".")
            forged = f"{board.url}/signin?t={body}x.{signature}"
            async with http.get(forged, allow_redirects=False) as response:
                assert response.status == 403
            async with http.get(f"{board.url}/api/tasks") as response:
                assert response.status == 401


async def test_the_shells_link_signs_in_and_an_old_or_foreign_token_is_refused():
    now = [1000.0]
    auth = BoardAuth(TOKEN, {OWNER}, clock=lambda: now[0])
    settings = Settings(
        _env_file=None, bot_token=TOKEN, allowed_users=frozenset({OWNER}), board_port=8765
    )  # type: ignore[call-arg]
    token = board_link(settings).partition("?t=")[2]
    # the shell signs with the wall clock; this board's clock says it started at 1000
    now[0] = time.time()
    auth._started = now[0] - 5
    _session_token, session = auth.redeem(token)
    assert session.user_id == OWNER
    with pytest.raises(Refused):
        auth.redeem(token)
    late = auth.link_token(OWNER)
    now[0] += 601
    with pytest.raises(Refused):
        auth.redeem(late)
    other = BoardAuth("123:" + "B" * 35, {OWNER})
    with pytest.raises(Refused):
        other.redeem(auth.link_token(OWNER))
    with pytest.raises(Refused):
        auth.redeem(BoardAuth(TOKEN, {OWNER, 5}).link_token(5))  # not allowed here


async def test_another_users_task_is_not_found_and_not_listed(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        await feed(app, message("/claude the owner's secret goal"))
        await wait_status(app, 1, TaskStatus.DONE)
        http, _csrf = await signed_in(app, board, user=OTHER)
        async with http:
            async with http.get(f"{board.url}/api/tasks") as response:
                assert (await response.json())["tasks"] == []
            for path in ("/api/tasks/1", "/api/tasks/1/transcript", "/api/tasks/1/stream"):
                async with http.get(board.url + path) as response:
                    assert response.status == 404, path
                    assert "secret" not in await response.text()
        http, _csrf = await signed_in(app, board)
        async with http:
            async with http.get(f"{board.url}/api/tasks") as response:
                rows = (await response.json())["tasks"]
            assert [r["title"] for r in rows] == ["the owner's secret goal"]
            assert rows[0]["badge"] == "done" and rows[0]["engine"] == "claude"
            async with http.get(f"{board.url}/api/tasks/1") as response:
                page = await response.json()
            assert page["goal"] == "the owner's secret goal"
            assert page["turns"][0]["cost_usd"] == 0.0123
            async with http.get(f"{board.url}/api/tasks/1/transcript") as response:
                items = (await response.json())["items"]
            kinds = [i["kind"] for i in items]
            assert kinds == ["text", "tool", "result", "end"], kinds
            assert items[1]["input"] == "make test" and items[2]["output"] == "42 passed"


async def test_a_change_without_the_csrf_token_is_refused(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(asks_first())) as (app, board):
        await feed(app, message("/claude wait for me"))
        await wait_status(app, 1, TaskStatus.RUNNING)
        http, csrf = await signed_in(app, board)
        async with http:
            async with http.post(f"{board.url}/api/tasks/1/cancel") as response:
                assert response.status == 403
            bad = {"X-CSRF-Token": csrf + "x"}
            async with http.post(f"{board.url}/api/tasks/1/cancel", headers=bad) as response:
                assert response.status == 403
            assert (await app.store.tasks.get(1)).status is TaskStatus.RUNNING
            good = {"X-CSRF-Token": csrf}
            async with http.post(f"{board.url}/api/tasks/1/cancel", headers=good) as response:
                assert response.status == 200
            await wait_status(app, 1, TaskStatus.CANCELLED)


def init_data(user: int, auth_date: int, token: str = TOKEN) -> str:
    """``initData`` as Telegram signs it for a Mini App of the bot with ``token``."""
    fields = {
        "auth_date": str(auth_date),
        "query_id": "AAF",
        "user": json.dumps({"id": user, "first_name": "U"}, separators=(",", ":")),
    }
    check = "\n".join(f"{k}={v}" for k, v in sorted(fields.items()))
    secret = hmac.new(b"WebAppData", token.encode(), hashlib.sha256).digest()
    fields["hash"] = hmac.new(secret, check.encode(), hashlib.sha256).hexdigest()
    return urlencode(fields)


async def test_mini_app_init_data_signs_in_only_when_valid_fresh_and_allowed(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        now = int(time.time())
        refused = [
            init_data(OWNER, now, token="123:" + "B" * 35),  # forged: another bot's key
            init_data(OWNER, now - 3700),  # stale
            init_data(999, now),  # not an allowed user
            init_data(OWNER, now).replace("U", "V"),  # tampered
        ]
        async with client() as http:
            for data in refused:
                async with http.post(
                    f"{board.url}/auth/webapp", data={"initData": data}
                ) as response:
                    assert response.status == 403
            async with http.post(
                f"{board.url}/auth/webapp", data={"initData": init_data(OWNER, now)}
            ) as response:
                assert response.status == 200
                signed = await response.json()
            bearer = {"Authorization": f"Bearer {signed['token']}"}
            async with http.get(f"{board.url}/api/me", headers=bearer) as response:
                assert response.status == 200 and (await response.json())["user"] == OWNER


async def test_allow_on_the_board_lets_the_turn_go_on_and_edits_the_telegram_message(
    tmp_path, workdir
):
    engine = FakeEngine(asks_first())
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        tg = await feed(app, message("/claude clean the build"))
        await wait_sent(tg, lambda c: "rm -rf build" in c.text, 10)
        http, csrf = await signed_in(app, board)
        async with http:
            async with http.get(f"{board.url}/api/tasks") as response:
                assert (await response.json())["tasks"][0]["badge"] == "approval"
            async with http.get(f"{board.url}/api/tasks/1") as response:
                pending = (await response.json())["pending"]
            assert len(pending) == 1 and "rm -rf build" in pending[0]["text"]
            qid = pending[0]["id"]
            answer = {"qid": qid, "answer": "allow"}
            async with http.post(
                f"{board.url}/api/tasks/1/answer", json=answer, headers={"X-CSRF-Token": csrf}
            ) as response:
                assert response.status == 200
            await wait_status(app, 1, TaskStatus.DONE)
            assert engine.decisions == [True]
            edited = await wait_sent(
                tg, lambda c: "rm -rf build" in c.text, 10, method="EditMessageText"
            )
            assert "✅ Allowed" in edited.text  # as after a tap on Allow in Telegram
            assert edited.reply_markup is None  # and the buttons went
            async with http.post(
                f"{board.url}/api/tasks/1/answer", json=answer, headers={"X-CSRF-Token": csrf}
            ) as response:
                assert response.status == 409  # the first answer won


async def test_always_on_the_board_stores_the_grant_in_one_answer(tmp_path, workdir):
    """The page shows the rule and sends "always": one answer, the chat's "Always…" then
    "confirm" in meaning (the grant, the Telegram message); a button's word ("confirm") or the
    desk's own answers ("timeout") are no answer of the owner's."""
    engine = FakeEngine(asks_first())
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        tg = await feed(app, message("/claude clean the build"))
        await wait_sent(tg, lambda c: "rm -rf build" in c.text, 10)
        http, csrf = await signed_in(app, board)
        async with http:
            async with http.get(f"{board.url}/api/tasks/1") as response:
                (pending,) = (await response.json())["pending"]
            assert pending["rule"] == "Bash(rm -rf build)"  # shown on the page before "always"
            url, headers = f"{board.url}/api/tasks/1/answer", {"X-CSRF-Token": csrf}
            for word in ("confirm", "timeout", "back"):
                body = {"qid": pending["id"], "answer": word}
                async with http.post(url, json=body, headers=headers) as response:
                    assert response.status == 409, word
            assert await app.store.grants.active(OWNER) == [] and engine.decisions == []
            body = {"qid": pending["id"], "answer": "always"}
            async with http.post(url, json=body, headers=headers) as response:
                assert response.status == 200 and (await response.json())["text"] == "Remembered."
            await wait_status(app, 1, TaskStatus.DONE)
        assert engine.decisions == [True]
        (grant,) = await app.store.grants.active(OWNER)
        assert grant.pattern == "Bash(rm -rf build)" and grant.engine == "claude"
        assert (await app.store.questions.get(pending["id"])).answer == "always"
        edited = await wait_sent(tg, lambda c: "rm -rf build" in c.text, 10, "EditMessageText")
        assert "Allowed, and remembered" in edited.text and edited.reply_markup is None


async def test_the_stream_brings_new_transcript_lines_within_a_flush_and_a_poll(tmp_path, workdir):
    """A new line reaches an open page after the transcript's flush (0.3 s) and the board's
    poll (``POLL_S``, 0.3 s): bounded at 2 s, the rest a loaded CI machine's margin (1.5 s
    was seen once in a whole run; a missed flush or poll would take the page's 5 s)."""
    release = asyncio.Event()

    async def slow(spec: TurnSpec):  # type: ignore[no-untyped-def]
        yield SessionStarted(SESSION, "fake-model")
        yield TextEmitted("first line")
        async with asyncio.timeout(20):
            await release.wait()
        yield TextEmitted("second line")
        yield TurnFinished(False, "done", SESSION, 0.0, Usage(1, 1))

    class Slow(FakeEngine):
        async def run(self, spec, approver, steering=None, ready=None):  # type: ignore[no-untyped-def]
            if ready is not None:
                await ready()
            async for event in slow(spec):
                yield event

    async with bot_with_board(tmp_path, workdir, Slow(())) as (app, board):
        await feed(app, message("/claude take your time"))
        http, _csrf = await signed_in(app, board)
        async with http, http.get(f"{board.url}/api/tasks/1/stream") as response:
            assert response.headers["Content-Type"].startswith("text/event-stream")
            seen: list[str] = []

            async def read_until(text: str) -> None:
                async with asyncio.timeout(5):
                    while not any(text in s for s in seen):
                        line = (await response.content.readline()).decode()
                        if line.startswith("data: "):
                            seen.append(line)

            await read_until("first line")
            release.set()
            began = time.monotonic()
            await read_until("second line")
            assert time.monotonic() - began < 2.0


def test_a_patch_is_cut_per_file_with_new_and_deleted_ones():
    patch = (
        "diff --git a/a.py b/a.py\nindex 1..2 100644\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n"
        "-old\n+new\n"
        "diff --git a/n.txt b/n.txt\nnew file mode 100644\n--- /dev/null\n+++ b/n.txt\n"
        "@@ -0,0 +1 @@\n+hello\n"
        "diff --git a/gone.md b/gone.md\ndeleted file mode 100644\n--- a/gone.md\n"
        "+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
    )
    files = split_patch(patch)
    assert [(f["path"], f["new"], f["deleted"]) for f in files] == [
        ("a.py", False, False),
        ("n.txt", True, False),
        ("gone.md", False, True),
    ]
    assert (files[0]["added"], files[0]["removed"]) == (1, 1)


async def test_board_is_off_unless_a_port_is_set(tmp_path, workdir):
    settings = board_settings(tmp_path, workdir, board_port=None)
    async with app_in_own_task(
        settings, session=RecordingSession(), executors={"claude": FakeEngine(finished("ok"))}
    ) as app:
        assert app.dispatcher["board"] is None
        session = await feed(app, message("/board"))
        assert "DETACH_BOARD_PORT" in session.new_texts()


def test_nothing_below_the_board_imports_it():
    """The board sits beside the composition root: only the root, the CLI and handlers know
    it; the packages it reads from never import it."""
    from tests.test_architecture import ROOT, imports, modules

    users = sorted(
        p.relative_to(ROOT).as_posix()
        for p in modules("bot")
        if p.parent.name != "board" and any(m.startswith("bot.board") for m in imports(p))
    )
    assert users == ["bot/app.py", "bot/cli.py"]


def test_detach_board_prints_a_link_the_board_takes(monkeypatch, capsys, tmp_path):
    from bot.cli import main

    monkeypatch.setenv("DETACH_BOT_TOKEN", TOKEN)
    monkeypatch.setenv("DETACH_ALLOWED_USERS", f"{OWNER},{OTHER}")
    monkeypatch.setenv("DETACH_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("DETACH_BOARD_PORT", "8765")
    auth = BoardAuth(TOKEN, {OWNER, OTHER})
    auth._started -= 5  # the board started before the link was made
    assert main(["board", "--user", str(OTHER)]) == 0
    link = capsys.readouterr().out.strip()
    assert link.startswith("http://127.0.0.1:8765/signin?t=")
    assert auth.redeem(link.partition("?t=")[2])[1].user_id == OTHER
    monkeypatch.delenv("DETACH_BOARD_PORT")
    assert main(["board"]) == 2
    assert "DETACH_BOARD_PORT" in capsys.readouterr().err


async def test_a_question_is_answered_on_the_board_like_a_tap(tmp_path, workdir):
    from bot.events import Question

    ask = Question("Which database?", "DB", ("SQLite", "PostgreSQL"))
    script = (
        SessionStarted(SESSION, "fake-model"),
        ApprovalRequest("AskUserQuestion", {}, "q1", "AskUserQuestion", questions=(ask,)),
        TurnFinished(False, "picked", SESSION, 0.01, Usage(1, 1)),
    )
    engine = FakeEngine(script)
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        tg = await feed(app, message("/claude choose a database"))
        await wait_sent(tg, lambda c: "Which database?" in c.text, 10)
        http, csrf = await signed_in(app, board)
        async with http:
            async with http.get(f"{board.url}/api/tasks") as response:
                assert (await response.json())["tasks"][0]["badge"] == "question"
            async with http.get(f"{board.url}/api/tasks/1") as response:
                (pending,) = (await response.json())["pending"]
            assert pending["kind"] == "question" and pending["options"] == ["SQLite", "PostgreSQL"]
            async with http.post(
                f"{board.url}/api/tasks/1/answer",
                json={"qid": pending["id"], "option": 1},
                headers={"X-CSRF-Token": csrf},
            ) as response:
                assert response.status == 200
            await wait_status(app, 1, TaskStatus.DONE)
            edited = await wait_sent(
                tg, lambda c: "PostgreSQL" in c.text, 10, method="EditMessageText"
            )
            assert edited.reply_markup is None


async def test_with_an_https_public_url_board_and_cards_open_the_mini_app(tmp_path, workdir):
    url = "https://board.example.org"
    engine = FakeEngine(finished("ok"))
    async with bot_with_board(tmp_path, workdir, engine, public_url=url) as (app, board):
        tg = await feed(app, message("/board"))
        sent = await wait_sent(tg, lambda c: "/signin?t=" in c.text, 10)
        (row,) = sent.reply_markup.inline_keyboard
        assert row[0].web_app.url == url and f"{url}/signin?t=" in sent.text
        tg = await feed(app, message("/claude build it"))
        card = await wait_sent(  # (the /board message's random sign-in token may hold "ok")
            tg, lambda c: "ok" in c.text and "/signin" not in c.text and c.reply_markup, 10
        )
        opens = [b.web_app.url for r in card.reply_markup.inline_keyboard for b in r if b.web_app]
        assert opens == [f"{url}/tasks/1"]


async def test_a_tasks_page_shows_its_check_runs_with_their_output(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        await feed(app, message("/claude check=“echo CHECK-SAYS-HI” mode=readonly prove it"))
        await wait_status(app, 1, TaskStatus.DONE, timeout_s=20)
        http, _csrf = await signed_in(app, board)
        async with http, http.get(f"{board.url}/api/tasks/1") as response:
            (check,) = (await response.json())["checks"]
        assert check["passed"] and check["command"] == "echo CHECK-SAYS-HI"
        assert "CHECK-SAYS-HI" in check["output"] and check["turn"] == 1


async def test_a_turns_lines_reach_the_store_soon_in_order_and_all_at_the_end(tmp_path):
    """What the live page relies on: an event waits at most the flush interval, not for 24
    more; the batch still writes once per ``size``; what is left is written on exit, also
    when the turn is cancelled; and the pulse moves with each write."""
    from bot.models import NewTask, TaskKind
    from bot.store import Store
    from bot.turns.transcribe import TranscriptBatch

    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite")
    try:
        task, turn = await store.tasks.create(
            NewTask(OWNER, OWNER, "claude", TaskKind.SESSION, "go", tmp_path), "go"
        )
        before = await store.pulse.mark()

        async def lines() -> list[str]:
            return [e.body["text"] for e in await store.transcript.after(task.id, 0, 100)]

        async with TranscriptBatch(store, task.id, turn.id, size=3, flush_s=0.5) as batch:
            await batch.add(("TextEmitted", {"text": "one"}))
            assert await lines() == []  # batched...
            async with asyncio.timeout(3):  # ...but not for long
                while await lines() != ["one"]:
                    await asyncio.sleep(0.02)
            for n in ("two", "three", "four"):
                await batch.add(("TextEmitted", {"text": n}))
            assert await lines() == ["one", "two", "three", "four"]  # a full batch at once
            await batch.add(("TextEmitted", {"text": "five"}))
        assert await lines() == ["one", "two", "three", "four", "five"]
        assert await store.pulse.mark() != before

        async def cancelled() -> None:
            async with TranscriptBatch(store, task.id, turn.id, size=50, flush_s=60) as batch:
                await batch.add(("TextEmitted", {"text": "six"}))
                await asyncio.sleep(60)

        running = asyncio.create_task(cancelled())
        await asyncio.sleep(0.05)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert (await lines())[-1] == "six"
    finally:
        await store.close()


async def test_follow_up_merge_and_discard_from_the_board(tmp_path, workdir):
    from tests.test_worktrees import make_repo

    repo = make_repo(workdir / "repo")

    def writes(spec: TurnSpec) -> tuple:
        (spec.cwd / f"turn-{len(engine.specs)}.md").write_text("work\n")
        return finished(f"wrote turn {len(engine.specs)}")

    engine = FakeEngine(writes)
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        await feed(app, message("/claude worktree=yes cwd=repo first"))
        await feed(app, message("/claude worktree=yes cwd=repo second"))
        await wait_status(app, 1, TaskStatus.DONE)
        await wait_status(app, 2, TaskStatus.DONE)
        http, csrf = await signed_in(app, board)
        headers = {"X-CSRF-Token": csrf}
        async with http:
            url = f"{board.url}/api/tasks/1"
            async with http.post(f"{url}/followup", json={"prompt": "more"}, headers=headers) as r:
                assert r.status == 200 and (await r.json())["turn"] == 2
            async with asyncio.timeout(10):
                while len(engine.specs) < 3 or (await app.store.tasks.get(1)).status.active:
                    await asyncio.sleep(0.05)
            assert engine.specs[-1].prompt == "more"
            async with http.get(f"{url}/diff") as response:
                paths = sorted(f["path"] for f in (await response.json())["files"])
            assert paths == ["turn-1.md", "turn-3.md"]
            async with http.post(f"{url}/merge", headers=headers) as response:
                assert response.status == 200 and (await response.json())["ok"]
            assert (repo / "turn-1.md").exists()
            url = f"{board.url}/api/tasks/2"
            async with http.post(f"{url}/discard", json={}, headers=headers) as response:
                assert response.status == 409  # not confirmed
            async with http.post(f"{url}/discard", json={"confirmed": True}, headers=headers) as r:
                assert r.status == 200
            assert (await app.store.worktrees.get(2)).state == "discarded"
            assert not (repo / "turn-2.md").exists()


def test_a_session_ends_when_it_expires_or_is_closed():
    """…and whose it was is still known for a while (the sign-in hint's language), never
    for a forged token or a user no longer allowed."""
    from bot.board.auth import SESSION_TTL_S

    now = [1000.0]
    auth = BoardAuth(TOKEN, {OWNER}, clock=lambda: now[0])
    link = auth.link_token(OWNER)
    token, _session = auth.redeem(link)
    assert auth.session(token) is not None and auth.session(token + "x") is None
    now[0] += SESSION_TTL_S + 1
    assert auth.session(token) is None
    assert auth.known(token) == OWNER and auth.known(None, link) == OWNER  # expired, used
    assert auth.known(token + "x") is None and auth.known(None, link + "x") is None
    token, _session = auth.redeem(auth.link_token(OWNER))
    auth.close(token)
    assert auth.session(token) is None and auth.known(token) == OWNER
    now[0] += 2 * SESSION_TTL_S + 1
    auth.redeem(auth.link_token(OWNER))  # a sign-in forgets sessions long over
    assert auth.known(token) is None
    other = BoardAuth(TOKEN, {OTHER}, clock=lambda: now[0])
    assert other.known(None, auth.link_token(OWNER)) is None  # not allowed there


async def test_the_sign_in_hint_speaks_the_users_lang_else_the_browsers(tmp_path, workdir):
    """A request with the ended session of a user, or a used sign-in link of theirs, is asked
    to sign in in their /lang, whatever the browser says; anybody else in the browser's."""
    ru_hint, en_hint = "Войдите по ссылке", "Sign in with the link"
    english, russian = {"Accept-Language": "en-US,en"}, {"Accept-Language": "ru-RU,ru"}
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        await feed(app, message("/lang ru"))
        await feed(app, message("/lang en", user=OTHER, language="ru"))
        for user, browser, hint in ((OWNER, english, ru_hint), (OTHER, russian, en_hint)):
            session = await feed(app, message("/board", user=user))
            link = LINK.search(session.new_texts()).group(1)
            http = client()
            async with http:
                async with http.get(link, allow_redirects=False) as response:
                    assert response.status == 303
                token = next(c.value for c in http.cookie_jar if c.key == "detach_board")
                async with http.get(f"{board.url}/api/me") as response:
                    csrf = (await response.json())["csrf"]
                async with http.post(
                    f"{board.url}/signout", headers={"X-CSRF-Token": csrf}
                ) as response:
                    assert response.status == 200
            ended = {**browser, "Authorization": f"Bearer {token}"}
            async with client() as http:
                async with http.get(f"{board.url}/tasks/1", headers=ended) as response:
                    assert response.status == 401 and hint in await response.text(), user
                async with http.get(link, headers=browser, allow_redirects=False) as response:
                    assert response.status == 403 and hint in await response.text(), user
        async with client() as http:  # nobody known: the browser's language
            for browser, hint in ((russian, ru_hint), (english, en_hint)):
                stranger = {**browser, "Authorization": "Bearer nobody"}
                async with http.get(f"{board.url}/tasks/1", headers=stranger) as response:
                    assert response.status == 401 and hint in await response.text()


async def test_a_tools_whole_input_shows_folded_and_secrets_never_stored(tmp_path, workdir):
    """A tool call's whole input reaches the board; the bot token and an API key of the
    environment, in its input, summary or output, are redacted in the store and on the page."""
    key = "sk-ant-api03-board-test-secret-value"
    script = "\n".join(f"echo step {n}" for n in range(200))
    said = f"use {TOKEN} and {key}"
    events = (
        SessionStarted(SESSION, "fake-model"),
        TextEmitted(said),
        ToolCalled("t1", "Bash", f"curl -H {key}", detail=f"{script}\nTOKEN={TOKEN} K={key}"),
        ToolFinished("t1", False, f"got {key}"),
        TurnFinished(False, "ok", SESSION, 0.01, Usage(1, 1)),
    )
    environ = {"ANTHROPIC_API_KEY": key, "PATH": "/usr/bin:/bin", "A_TOKEN": "use"}
    async with bot_with_board(tmp_path, workdir, FakeEngine(events), environ=environ) as (
        app,
        board,
    ):
        await feed(app, message("/claude use the keys"))
        await wait_status(app, 1, TaskStatus.DONE)
        stored = json.dumps([x.body for x in await app.store.transcript.after(1, 0, 100)])
        http, _csrf = await signed_in(app, board)
        async with http, http.get(f"{board.url}/api/tasks/1/transcript") as response:
            shown = await response.json()
    for text in (stored, json.dumps(shown)):
        assert key not in text and TOKEN not in text
        assert "[redacted]" in text
    (call,) = [i for i in shown["items"] if i["kind"] == "tool"]
    assert call["input"] == "curl -H [redacted]"
    assert call["detail"].startswith(script) and call["detail"].endswith("K=[redacted]")
    (result,) = [i for i in shown["items"] if i["kind"] == "result"]
    assert result["output"] == "got [redacted]"
    assert "use [redacted] and [redacted]" in stored  # a value this short is no secret


def test_a_tools_input_is_kept_whole_up_to_its_cap():
    from bot.events import DETAIL_CHARS, detail_of

    assert detail_of({"command": "ls", "n": 3}) == "command: ls\nn: 3"
    assert detail_of({"old": "a\nb"}) == "old:\na\nb"
    long = detail_of({"content": "x" * (DETAIL_CHARS * 2)})
    assert len(long) <= DETAIL_CHARS + 16 and long.endswith("… cut")


async def test_every_response_carries_a_strict_content_security_policy(tmp_path, workdir):
    """Pages, JSON, static files and refusals alike: only the board's own scripts run (no
    inline script, no eval, no telegram.org), nothing is sniffed, only Telegram Web frames it."""
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        http, _csrf = await signed_in(app, board)
        async with http:
            for path in ("/", "/tasks/1", "/api/me", "/api/tasks", "/static/board.js", "/nope"):
                async with http.get(board.url + path) as response:
                    policy = response.headers.get("Content-Security-Policy", "")
                    assert response.headers.get("X-Content-Type-Options") == "nosniff", path
                    directives = dict((d.split(" ", 1) + [""])[:2] for d in policy.split("; ") if d)
                    assert directives["default-src"] == "'self'", path
                    assert directives["script-src"] == "'self'", path
                    assert "unsafe" not in policy and "telegram.org/js" not in policy, path
                    assert directives["frame-ancestors"] == "'self' https://web.telegram.org"
                    assert directives["object-src"] == "'none'"
                    assert "X-Frame-Options" not in response.headers  # it would bar Telegram Web
            async with client() as anonymous, anonymous.get(board.url + "/api/tasks") as refused:
                assert refused.status == 401
                assert "script-src 'self'" in refused.headers["Content-Security-Policy"]


async def test_a_plain_checkout_tasks_diff_shows_what_it_changed_since_it_started(
    tmp_path, workdir
):
    """No worktree: the files changed since the first turn's recorded baseline, committed or
    not, new and deleted ones included, not the owner's earlier edits; through the guarded
    git: the repository's own configuration (external diff, textconv, fsmonitor) never runs."""
    from tests.test_worktrees import make_repo, sh_git

    repo = make_repo(workdir / "repo")
    ran = tmp_path / "repository-config-ran"
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {ran}\n")
    hook.chmod(0o755)
    (repo / ".gitattributes").write_text("*.py diff=x\n")
    sh_git(repo, "add", ".gitattributes")
    sh_git(repo, "commit", "-q", "-m", "attributes")
    (repo / "notes.txt").write_text("the owner's, before the task\n")
    for key in ("diff.external", "core.fsmonitor", "diff.x.textconv"):  # planted last
        sh_git(repo, "config", key, str(hook))

    def edits(spec: TurnSpec) -> tuple:
        assert spec.cwd == repo / "src"
        (spec.cwd / "app.py").write_text("print('v2')\n")
        (spec.cwd / "NEW.md").write_text("a new file\nsecond line\n")
        (spec.cwd.parent / "README.md").unlink()
        (spec.cwd / "done.py").write_text("x = 1\n")
        sh_git(spec.cwd, "-c", "core.fsmonitor=false", "add", "done.py")
        sh_git(spec.cwd, "-c", "core.fsmonitor=false", "commit", "-q", "-m", "the agent's")
        return finished("edited")

    async with bot_with_board(tmp_path, workdir, FakeEngine(edits)) as (app, board):
        await feed(app, message("/claude cwd=repo/src change things"))
        await wait_status(app, 1, TaskStatus.DONE)
        assert await app.store.worktrees.get(1) is None  # a plain checkout
        http, _csrf = await signed_in(app, board)
        async with http, http.get(f"{board.url}/api/tasks/1/diff") as response:
            assert response.status == 200
            found = await response.json()
    assert found["scope"] == "task"
    files = {f["path"]: f for f in found["files"]}
    assert set(files) == {"src/app.py", "src/NEW.md", "README.md", "src/done.py"}  # not notes
    assert "+print('v2')" in files["src/app.py"]["patch"]
    assert "-print('v1')" in files["src/app.py"]["patch"]
    assert files["src/NEW.md"]["new"] and files["src/NEW.md"]["added"] == 2
    assert files["README.md"]["deleted"] and files["README.md"]["removed"] == 1
    assert files["src/done.py"]["new"] and "+x = 1" in files["src/done.py"]["patch"]
    assert not ran.exists(), "the repository's configuration ran a program"


async def test_a_plain_checkout_diff_leaves_out_the_owners_earlier_edits(tmp_path, workdir):
    """A file the owner had edited before the task, edited further by it: only the task's
    lines; a new file of the owner's the task deleted: deleted, with its lines; a file the
    owner edited holding the bot token: its content never recorded (diffed from the commit)."""
    from tests.test_worktrees import make_repo

    repo = make_repo(workdir / "repo")
    (repo / "src" / "app.py").write_text("print('v1')\nprint('the owner')\n")
    (repo / "draft.md").write_text("the owner's draft\nsecond line\n")
    (repo / "README.md").write_text(f"hello\ntoken {TOKEN}\n")

    def edits(spec: TurnSpec) -> tuple:
        app_py = spec.cwd / "src" / "app.py"
        app_py.write_text(app_py.read_text() + "print('the task')\n")
        (spec.cwd / "draft.md").unlink()
        (spec.cwd / "README.md").write_text(f"hello\ntoken {TOKEN}\nmore\n")
        return finished("edited")

    async with bot_with_board(tmp_path, workdir, FakeEngine(edits)) as (app, board):
        await feed(app, message("/claude cwd=repo change things"))
        await wait_status(app, 1, TaskStatus.DONE)
        first = await app.store.transcript.after(1, 0, 5)
        (record,) = [x.body for x in first if x.kind == "Baseline"]
        http, _csrf = await signed_in(app, board)
        async with http, http.get(f"{board.url}/api/tasks/1/diff") as response:
            found = await response.json()
    assert set(record["texts"]) == {"src/app.py", "draft.md"}  # not the file with the token
    assert TOKEN not in json.dumps(record)
    assert found["scope"] == "task"
    files = {f["path"]: f for f in found["files"]}
    assert set(files) == {"src/app.py", "draft.md", "README.md"}
    app_py = files["src/app.py"]
    assert (app_py["added"], app_py["removed"]) == (1, 0) and "+print('the task')" in app_py[
        "patch"
    ]
    assert "+print('the owner')" not in app_py["patch"] and not app_py["new"]
    draft = files["draft.md"]
    assert draft["deleted"] and draft["removed"] == 2 and "-the owner's draft" in draft["patch"]
    assert "+more" in files["README.md"]["patch"]  # from the commit: the owner's line too
    assert TOKEN not in json.dumps(found) and "[redacted]" in files["README.md"]["patch"]


async def test_a_task_outside_any_repository_has_no_diff(tmp_path, workdir):
    async with bot_with_board(tmp_path, workdir, FakeEngine(finished("ok"))) as (app, board):
        await feed(app, message("/claude nothing to diff"))
        await wait_status(app, 1, TaskStatus.DONE)
        http, _csrf = await signed_in(app, board)
        async with http, http.get(f"{board.url}/api/tasks/1/diff") as response:
            assert await response.json() == {"files": [], "scope": "none"}


async def test_without_a_recorded_start_the_checkouts_uncommitted_changes_show(tmp_path, workdir):
    """The first turn found no repository (none recorded): the one the agent made shows its
    uncommitted changes, marked as the checkout's."""
    from tests.test_worktrees import make_repo

    (workdir / "plain").mkdir()

    def makes_a_repo(spec: TurnSpec) -> tuple:
        make_repo(spec.cwd / "repo")
        (spec.cwd / "repo" / "README.md").write_text("changed\n")
        return finished("made one")

    async with bot_with_board(tmp_path, workdir, FakeEngine(makes_a_repo)) as (app, board):
        await feed(app, message("/claude cwd=plain make a repository"))
        await wait_status(app, 1, TaskStatus.DONE)
        task = await app.store.tasks.get(1)
        await app.store.tasks.set_cwd(1, str(Path(task.cwd) / "repo"))
        http, _csrf = await signed_in(app, board)
        async with http, http.get(f"{board.url}/api/tasks/1/diff") as response:
            found = await response.json()
    assert found["scope"] == "checkout"
    assert [f["path"] for f in found["files"]] == ["README.md"]
