"""The owner tools of every task's agent (issue #55): `notify` and `ask_owner`.

End to end, the real pinned claude of a plain task (no ``subtasks=yes``) gets `detach mcp
--task N` and calls its tools, driven by the scripted model: a note arrives once and silently,
an urgent one buzzes; a question with its answers as buttons buzzes, a tap of somebody else is
refused and the owner's tap returns the answer to the agent; a question nobody answers returns
"no answer" after DETACH_PREFLIGHT_WAIT_S and its message says so. In-process through the
SDK's client: the `--task` server has the owner tools and no sub-task tool, bad questions are
refused, and a task a schedule started is refused under DETACH_ASK_UNATTENDED=no."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from mcp import Client

from bot.mcp.desk import McpDesk, McpPlace
from bot.mcp.server import build_owner_server
from bot.models import NewTask, QuestionStatus, TaskKind, TaskStatus
from bot.store import Store
from bot.tasks.clients import ClientTasks
from bot.tasks.owner_ask import AskRules
from bot.turns.transcript import human_line
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import Call, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_approvals_e2e import OTHER, answer_of, buttons, edited
from tests.test_local_engine import settings_for as local_settings
from tests.test_local_engine import tool as local_tool
from tests.test_local_engine import tool_results
from tests.test_mcp import refused, tool_use
from tests.test_notify import silent


async def question_of(fake: FakeTelegram, words: str, timeout_s: float) -> Call:
    """The question's own message (its answers as buttons): a turn running a few seconds may
    show the pending ask_owner call, its words included, in its progress line first."""
    return await fake.wait_call(
        "sendMessage",
        lambda c: (
            int(c.params["chat_id"]) == OWNER
            and words in c.params["text"]
            and "reply_markup" in c.params
        ),
        timeout_s,
    )


async def test_a_tap_answers_the_agent_and_nobody_elses_tap_counts(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    question = "MARK-Q which database?"
    anthropic.script(
        "MARK-ASKER",
        [
            tool_use("ask_owner", question=question, answers=["SQLite", "PostgreSQL"]),
            {"text": "ASKER finished."},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            allowed_users=frozenset({OWNER, OTHER}),
            owner_tools="walkaway",
        )
        async with running_bot(settings, agent_env):
            await fake.user_message("/detach mode=ask MARK-ASKER work", OWNER)
            ask = await question_of(fake, "MARK-Q", 90)
            assert not silent(ask)  # it needs the owner: it buzzes
            keys = buttons(ask)
            assert list(keys) == ["SQLite", "PostgreSQL"]
            msg_id = ask.result["message_id"]
            tap = await fake.press(OWNER, msg_id, keys["PostgreSQL"], OTHER)
            assert "not your task" in await answer_of(fake, tap)
            tap = await fake.press(OWNER, msg_id, keys["PostgreSQL"], OWNER)
            await answer_of(fake, tap)
            answered = await edited(fake, msg_id, "PostgreSQL")
            assert "reply_markup" not in answered.params
            await fake.wait_text(OWNER, "ASKER finished.", timeout_s=90)
    requests = anthropic.requests_for("MARK-ASKER")
    assert '"answer": "PostgreSQL"' in requests[1]["last_user_text"]
    assert "`ask_owner` tool" in requests[0]["system"] and "`notify` tool" in requests[0]["system"]
    tools = requests[0]["tools"]
    assert {"mcp__detach__notify", "mcp__detach__ask_owner"} <= set(tools)
    assert not any(t.startswith("mcp__detach__") and "start" in t for t in tools)  # no sub-tasks


async def test_notes_and_a_question_nobody_answers(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-QUIET",
        [
            tool_use("notify", text="MARK-NOTE1 plain"),
            tool_use("notify", text="MARK-NOTE2 look", urgent=True),
            tool_use("ask_owner", question="MARK-Q2 tabs or spaces?", answers=["tabs", "spaces"]),
            {"text": "QUIET finished."},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            notify_gap_s=0,
            owner_tools="walkaway",
            preflight_wait_s=3,
            stall_s=1,  # a question's wait is the owner's time, not the agent's silence
        )
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/detach mode=ask MARK-QUIET work", OWNER)
            await fake.wait_text(OWNER, "QUIET finished.", timeout_s=120)
            notes = [
                c
                for c in fake.calls
                if c.method == "sendMessage" and "📣" in c.params.get("text", "")
            ]
            assert [silent(c) for c in notes] == [True, False]  # once each; urgent buzzes
            ask = await question_of(fake, "MARK-Q2", 30)
            closed = await edited(fake, ask.result["message_id"], "No answer in time")
            assert "reply_markup" not in closed.params
            task = await app.store.tasks.get(1)
            assert task is not None and task.status is TaskStatus.DONE
            lines = await app.store.transcript.after(1, 0, 500)
            (asked,) = [line for line in lines if line.kind == "AskedOwner"]
            assert asked.body["answer"] is None
            assert human_line(asked.kind, asked.body) == (
                "❓ MARK-Q2 tabs or spaces? → no answer: use your judgement"
            )
            said = [c.params.get("text", "") for c in fake.calls if c.method == "sendMessage"]
            assert not [t for t in said if "no word from the agent" in t and "ask_owner" in t]
    requests = anthropic.requests_for("MARK-QUIET")
    assert "no answer: use your judgement" in requests[3]["last_user_text"]


QUICK = AskRules(wait_s=1, poll_s=0.05)


@contextlib.asynccontextmanager
async def task_server(
    tmp_path: Path, rules: AskRules = QUICK
) -> AsyncIterator[tuple[Client, Store]]:
    """`detach mcp --task 1` in-process on a real SQLite file, task 1 running a turn."""
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite")
    new = NewTask(OWNER, OWNER, "claude", TaskKind.DETACH, "goal", tmp_path)
    task = (await store.tasks.create(new, "goal"))[0]
    await store.tasks.set_status(task.id, TaskStatus.RUNNING)
    place = McpPlace(tmp_path, OWNER, OWNER, ("claude",), 500, tmp_path / "alive", parent=task)
    tasks = ClientTasks(store, owner=OWNER, asks=rules)
    try:
        tasks = await tasks.for_task(task.id)
        async with Client(build_owner_server(McpDesk(tasks, place))) as client:
            yield client, store
    finally:
        await store.close()


async def test_the_task_server_has_the_owner_tools_alone(tmp_path):
    async with task_server(tmp_path) as (client, _):
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"notify", "ask_owner"}


async def test_bad_questions_are_refused_with_the_reason(tmp_path):
    async with task_server(tmp_path) as (client, store):
        assert "1 to 4 answers" in await refused(
            client, "ask_owner", {"question": "q?", "answers": []}
        )
        assert "at most 500" in await refused(
            client, "ask_owner", {"question": "x" * 501, "answers": ["a"]}
        )
        assert "all different" in await refused(
            client, "ask_owner", {"question": "q?", "answers": ["a", "a"]}
        )
        assert await store.questions.pending_count(1) == 0


async def test_a_scheduled_task_may_not_ask_when_the_owner_said_so(tmp_path):
    rules = AskRules(wait_s=1, poll_s=0.05, unattended=False)
    async with task_server(tmp_path, rules) as (client, store):
        await store.audit.record("schedule_run", OWNER, 1, "S1")
        said = await refused(client, "ask_owner", {"question": "q?", "answers": ["a"]})
        assert "DETACH_ASK_UNATTENDED=no" in said


async def test_a_question_unanswered_in_time_is_closed_and_says_so(tmp_path):
    async with task_server(tmp_path) as (client, store):
        asked = {"question": "q <b>now</b>?", "answers": ["a", "b"]}
        result = await client.call_tool("ask_owner", asked)
        assert not result.is_error and "no answer" in result.content[0].text
        (row,) = await store.outbox.sends_about(1, ["approval"])
        assert "q &lt;b&gt;now&lt;/b&gt;?" in row.payload["text"] and not row.payload["silent"]
        edit = await store.outbox.get(row.id + 1)  # the agent's words stay escaped
        assert edit is not None and "No answer in time" in edit.payload["text"]
        assert "q &lt;b&gt;now&lt;/b&gt;?" in edit.payload["text"]
        question = await store.questions.get(1)
        assert question is not None and question.status == QuestionStatus.EXPIRED


def codex_call(name: str, **arguments: object) -> dict:
    """A Codex model's call of an owner tool, found first through its ``tool_search``."""
    return {"call": name, "namespace": "mcp__detach", "arguments": arguments}


@pytest.mark.parametrize("mode", ["ask", "sandbox"])  # /codex's default, walk-away's
async def test_codex_notes_and_asks_through_its_mcp_config(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, openai, workdir, mode
):
    openai.script(
        "MARK-CXASK",
        [
            {"search": "notify the owner, ask the owner"},
            codex_call("notify", text="MARK-CXNOTE started"),
            codex_call("ask_owner", question="MARK-CXQ which port?", answers=["8080", "9090"]),
            {"text": "CXASK finished."},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin, owner_tools="all"
        )
        async with running_bot(settings, {**agent_env, **codex_env}):
            await fake.user_message(f"/codex mode={mode} MARK-CXASK work", OWNER)
            ask = await fake.wait_text(OWNER, "MARK-CXQ", timeout_s=90)
            assert not silent(ask)
            note = await fake.wait_text(OWNER, "MARK-CXNOTE")
            assert silent(note)
            tap = await fake.press(OWNER, ask.result["message_id"], buttons(ask)["9090"], OWNER)
            await answer_of(fake, tap)
            await fake.wait_text(OWNER, "CXASK finished.", timeout_s=90)
    requests = openai.requests_for("MARK-CXASK")
    assert '"answer": "9090"' in str(requests[3]["input"][-1])
    assert "`ask_owner` tool" in requests[0]["user_text"]


@pytest.fixture
def chat() -> Iterator[ChatMock]:
    mock = ChatMock().start()
    yield mock
    mock.stop()


async def test_local_notes_and_asks_through_the_same_server(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    chat.script(
        "MARK-LCASK",
        [
            local_tool("detach__notify", text="MARK-LCNOTE started"),
            local_tool(
                "detach__ask_owner", question="MARK-LCQ which branch?", answers=["main", "dev"]
            ),
            {"text": "LCASK finished."},
        ],
    )
    async with FakeTelegram() as fake:
        settings = local_settings(tmp_path, fake, claude_bin, workdir, chat, owner_tools="all")
        async with running_bot(settings, agent_env):
            await fake.user_message("/local MARK-LCASK work", OWNER)
            ask = await fake.wait_text(OWNER, "MARK-LCQ", timeout_s=90)
            assert silent(await fake.wait_text(OWNER, "MARK-LCNOTE"))
            tap = await fake.press(OWNER, ask.result["message_id"], buttons(ask)["dev"], OWNER)
            await answer_of(fake, tap)
            await fake.wait_text(OWNER, "LCASK finished.", timeout_s=90)
    requests = chat.requests_for("MARK-LCASK")
    assert '"answer": "dev"' in tool_results(requests[2])[-1]
    assert "`ask_owner` tool" in str(requests[0]["messages"][0])


async def test_a_cancelled_turn_leaves_no_question_open(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(
        "MARK-ASKCANCEL",
        [
            tool_use("ask_owner", question="MARK-Q3 go on?", answers=["yes", "no"]),
            {"text": "never"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, owner_tools="all")
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/claude MARK-ASKCANCEL work", OWNER)
            ask = await question_of(fake, "MARK-Q3", 90)
            await fake.user_message("/cancel 1", OWNER)
            ended = await edited(fake, ask.result["message_id"], "turn ended", timeout_s=60)
            assert "reply_markup" not in ended.params
            assert await app.store.questions.pending_count(1) == 0


async def test_the_answer_is_read_back_from_the_row_whoever_closed_it(tmp_path):
    """The bot (another process) answers the row, or expires it at a restart."""
    async with task_server(tmp_path, AskRules(wait_s=60, poll_s=0.05)) as (client, store):
        for qid, close in ((1, "answer"), (2, "restart")):
            asked = {"question": f"q{qid}?", "answers": ["a", "b"]}
            call = asyncio.create_task(client.call_tool("ask_owner", asked))
            async with asyncio.timeout(10):
                while await store.questions.pending_count(1) == 0:
                    await asyncio.sleep(0.05)
            if close == "answer":
                assert await store.questions.resolve(qid, QuestionStatus.ANSWERED, "b")
            else:
                assert len(await store.questions.expire_pending()) == 1
            result = await asyncio.wait_for(call, 10)
            said = json.loads(result.content[0].text)
            expected = {"answered": True, "answer": "b"} if close == "answer" else None
            assert said == expected or (expected is None and not said["answered"])
