"""A transcript as JSON Lines: ``/export <id> jsonl`` through the real bot against the fake Bot
API and ``detach export --jsonl`` in the shell, each read back line by line: the same events the
board reads, in order, tool output whole; another user's task is refused as a missing one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from bot.events import SessionStarted, TextEmitted, ToolCalled, ToolFinished, TurnFinished, Usage
from bot.models import TurnSpec
from bot.store import Store
from bot.turns.items import TOOL_OUTPUT_CHARS
from tests.support.fake_engine import FakeEngine
from tests.support.fake_forum import FakeForum
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_cli import detach

SESSION = "0f0e0d0c-0b0a-4908-8706-050403020100"
FRIEND = 222  # allowed too, not the task's owner
LONG = "x" * (TOOL_OUTPUT_CHARS + 500)  # more than the board draws: the export keeps it whole


def script(spec: TurnSpec) -> tuple:
    return (
        SessionStarted(SESSION, "fake-model"),
        TextEmitted("Looking at the logs — «ошибки»"),
        ToolCalled("t1", "Bash", "cat big.log"),
        ToolFinished("t1", False, LONG),
        TurnFinished(
            is_error=False,
            result_text="Done.",
            session_id=SESSION,
            cost_usd=0.01,
            usage=Usage(input_tokens=10, output_tokens=5),
        ),
    )


def read_lines(data: str) -> list[dict]:
    assert data.endswith("\n")
    return [json.loads(line) for line in data.splitlines()]


def check_items(items: list[dict]) -> None:
    assert [i["kind"] for i in items] == ["text", "tool", "result", "end"]
    assert items[0]["text"] == "Looking at the logs — «ошибки»"
    assert (items[1]["name"], items[1]["input"], items[1]["tool"]) == ("Bash", "cat big.log", "t1")
    assert items[2]["output"] == LONG and items[2]["error"] is False
    assert items[3] == {**items[3], "error": False, "text": ""}
    lines = [i["line"] for i in items]
    assert lines == sorted(set(lines)) and all(i["turn"] == items[0]["turn"] for i in items)


async def test_export_jsonl_in_the_chat_sends_the_transcript_a_line_an_event(
    tmp_path: Path, workdir: Path
):
    async with FakeForum(private_topics=True) as fake:
        settings = make_settings(
            tmp_path / "data", fake, "claude", workdir, allowed_users=frozenset({OWNER, FRIEND})
        )
        async with running_bot(settings, {}, {"claude": FakeEngine(script)}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude read the logs", OWNER)
            opened = await fake.wait_call("createForumTopic")
            thread = int(opened.result["message_thread_id"])
            await fake.wait_text(OWNER, "Done.", timeout_s=20)
            mark = len(fake.calls)
            await fake.user_message("/export 1 jsonl", OWNER)
            sent = await fake.wait_call("sendDocument", after=mark)
            assert sent.params["caption"].endswith("transcript as JSON Lines (4 events)")
            data = fake.files[sent.result["document"]["file_id"]].decode()
            items = read_lines(data)
            check_items(items)
            stored = await app.store.transcript.after(1, 0, 100)
            readable = {"TextEmitted", "ToolCalled", "ToolFinished", "TurnFinished"}
            assert [i["line"] for i in items] == [s.line for s in stored if s.kind in readable]
            # in the task's topic the command needs no number
            mark = len(fake.calls)
            await fake.user_message("/export jsonl", OWNER, thread_id=thread)
            again = await fake.wait_call("sendDocument", after=mark)
            assert fake.files[again.result["document"]["file_id"]].decode() == data
            # another allowed user: the task is not theirs, so it is as if it did not exist
            mark = len(fake.calls)
            await fake.user_message("/export 1 jsonl", FRIEND)
            refused = await fake.wait_call("sendMessage", after=mark)
            assert int(refused.params["chat_id"]) == FRIEND and "#1" in refused.params["text"]
            assert not [c for c in fake.calls[mark:] if c.method == "sendDocument"]


def test_export_jsonl_in_the_shell_prints_the_same_items(tmp_path: Path):
    assert detach(tmp_path, "add", "--mode", "ask", "Read", "the", "logs").returncode == 0

    async def ran() -> None:
        store = await Store.open(f"sqlite:///{tmp_path / 'data' / 'detach.sqlite'}")
        try:
            turn = await store.tasks.last_turn(1)
            events = [
                ("SessionStarted", {"session_id": SESSION}),
                ("TextEmitted", {"text": "Looking at the logs — «ошибки»"}),
                ("ToolCalled", {"tool_use_id": "t1", "name": "Bash", "summary": "cat big.log"}),
                ("ToolFinished", {"tool_use_id": "t1", "is_error": False, "output": LONG}),
                ("Usage", {"input_tokens": 5}),
                ("TurnFinished", {"is_error": False}),
            ]
            await store.transcript.append(1, turn.id, events)
        finally:
            await store.close()

    asyncio.run(ran())
    exported = detach(tmp_path, "export", "--jsonl", "1")
    assert exported.returncode == 0, exported.stderr
    items = read_lines(exported.stdout)
    check_items(items)
    # a reader that has the first two asks for what follows: the rest, nothing twice
    rest = detach(tmp_path, "export", "--jsonl", "1", "--after", str(items[1]["line"]))
    assert read_lines(rest.stdout) == items[2:]
    missing = detach(tmp_path, "export", "--jsonl", "99")
    assert missing.returncode == 1 and "#99" in missing.stderr
