"""What the phone shows over a task's whole life, through the real bot over HTTP against the
fake Bot API (an engine that replays a recorded stream, so these are quick): acknowledgements
that end true, buttons that follow the task, one buzz for a quick task, /notify, a plain
message is a task, a reply right after the acknowledgement continues it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from bot.events import ApprovalRequest, SessionStarted, ToolCalled, TurnFinished, Usage
from bot.models import TaskStatus, TurnSpec
from bot.telegram.render import usd
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked
from tests.support.machine import empty_repository

SESSION = "0f0e0d0c-0b0a-4908-8706-050403020100"


def answer(text: str, error: bool = False) -> tuple:
    return (
        SessionStarted(SESSION, "fake-model"),
        ToolCalled("t1", "Bash", "make test"),
        TurnFinished(
            is_error=error,
            result_text=text,
            session_id=SESSION,
            cost_usd=0.01,
            usage=Usage(input_tokens=10, output_tokens=5),
        ),
    )


def waits_for_approval() -> tuple:
    """A turn that stays running until its approval is answered (or the task cancelled)."""
    return (
        SessionStarted(SESSION, "fake-model"),
        ApprovalRequest("Bash", {"command": "rm -rf build"}, "t1", "Bash(rm -rf build)"),
        *answer("after the approval")[1:],
    )


def sends(fake: FakeTelegram, after: int = 0) -> list:
    return [c for c in fake.calls[after:] if c.method in ("sendMessage", "sendDocument") and c.ok]


def buzzing(fake: FakeTelegram, after: int = 0) -> list:
    return [
        c for c in sends(fake, after) if str(c.params.get("disable_notification")).lower() != "true"
    ]


def buttons_of(fake: FakeTelegram, message_id: int) -> list[str]:
    markup = fake.find_message(OWNER, message_id).get("reply_markup") or {}
    return [b["text"] for row in markup.get("inline_keyboard", []) for b in row]


def buttons_data(fake: FakeTelegram, message_id: int) -> list[str]:
    markup = fake.find_message(OWNER, message_id).get("reply_markup") or {}
    return [b["callback_data"] for row in markup.get("inline_keyboard", []) for b in row]


async def until(predicate, timeout_s: float = 15) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.05)


def settings(tmp_path: Path, fake: FakeTelegram, workdir: Path, **overrides: object):  # type: ignore[no-untyped-def]
    return make_settings(tmp_path / "data", fake, "claude", workdir, **overrides)


async def test_a_quick_task_buzzes_once_and_its_acknowledgement_ends_true(tmp_path, workdir):
    engine = FakeEngine(answer("All green."))
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            mark = len(fake.calls)
            await fake.user_message("/detach run the tests", OWNER)
            ack = await fake.wait_text(OWNER, "#1 run-tests")
            assert "Cancel" in str(ack.params["reply_markup"])
            card = await fake.wait_text(OWNER, "All green.", timeout_s=20)
            assert "run the tests" in card.params["text"]  # the card repeats the goal
            ack_id = ack.result["message_id"]
            await until(lambda: "done" in fake.find_message(OWNER, ack_id)["text"])
            assert buttons_of(fake, ack_id) == []  # nothing left to cancel
            assert not [c for c in sends(fake, mark) if "· running ·" in c.params["text"]]
            assert len(buzzing(fake, mark)) == 1  # the card; the acknowledgement is silent
            assert (await app.store.tasks.get(1)).status is TaskStatus.DONE


async def test_acknowledgements_after_failed_and_cancelled(tmp_path, workdir):
    def script(spec: TurnSpec) -> tuple:
        return waits_for_approval() if "wait" in spec.prompt else answer("it broke", error=True)

    async with FakeTelegram() as fake:
        engine = FakeEngine(script)
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude fail now", OWNER)
            failed_ack = await fake.wait_text(OWNER, "#1 fail-now")
            await fake.wait_text(OWNER, "it broke", timeout_s=20)
            await until(
                lambda: (
                    "failed" in fake.find_message(OWNER, failed_ack.result["message_id"])["text"]
                )
            )
            assert buttons_of(fake, failed_ack.result["message_id"]) == []

            await fake.user_message("/claude wait for me", OWNER)
            ack = await fake.wait_text(OWNER, "#2 wait-me")
            await fake.wait_text(OWNER, "wants to use", timeout_s=20)
            await fake.user_message("/cancel 2", OWNER)
            ack_id = ack.result["message_id"]
            await until(lambda: "cancelled" in fake.find_message(OWNER, ack_id)["text"])
            assert buttons_of(fake, ack_id) == []
            assert (await app.store.tasks.get(2)).status is TaskStatus.CANCELLED


async def test_card_buttons_follow_archive_and_retry(tmp_path, workdir):
    engine = FakeEngine(answer("Answer."))
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude first task", OWNER)
            card = await fake.wait_text(OWNER, "Answer.", timeout_s=20)
            card_id = card.result["message_id"]
            assert "🔁 Retry" in " ".join(buttons_of(fake, card_id))
            data = {
                b["text"]: b["callback_data"]
                for row in card.params["reply_markup"]["inline_keyboard"]
                for b in row
            }
            mark = len(fake.calls)
            await fake.press(
                OWNER, card_id, next(v for k, v in data.items() if "Retry" in k), OWNER
            )
            again = await fake.wait_text(OWNER, "Answer.", timeout_s=20, after=mark)
            await until(lambda: not any("Retry" in b for b in buttons_of(fake, card_id)))
            await fake.press(
                OWNER,
                again.result["message_id"],
                next(
                    b["callback_data"]
                    for row in again.params["reply_markup"]["inline_keyboard"]
                    for b in row
                    if "Archive" in b["text"]
                ),
                OWNER,
            )
            new_id = again.result["message_id"]
            await until(lambda: buttons_of(fake, new_id) == [] and buttons_of(fake, card_id) == [])
            assert "archived" in fake.find_message(OWNER, new_id)["text"]


async def test_archive_all_takes_the_buttons_off_every_archived_card(tmp_path, workdir):
    engine = FakeEngine(answer("Done here."))
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            cards = []
            for word in ("alpha", "beta"):
                mark = len(fake.calls)
                await fake.user_message(f"/claude {word} job", OWNER)
                card = await fake.wait_text(OWNER, "Done here.", timeout_s=20, after=mark)
                cards.append(card.result["message_id"])
                assert buttons_of(fake, cards[-1])  # Retry, Archive, Transcript…
            await fake.user_message("/tasks", OWNER)
            listed = await fake.wait_text(OWNER, "Your tasks")
            assert "#2 beta-job</b> · done · 0s ago" in listed.params["text"]
            await fake.user_message("/archive all", OWNER)
            await fake.wait_text(OWNER, "Archived 2 tasks")
            await until(lambda: all(buttons_of(fake, card) == [] for card in cards))
            assert all("archived" in fake.find_message(OWNER, c)["text"] for c in cards)
            await fake.user_message("/tasks", OWNER)  # not "No tasks yet": they are archived
            await fake.wait_text(OWNER, "No open tasks; 2 archived.")


async def test_notify_quiet_silences_everything(tmp_path, workdir):
    engine = FakeEngine(answer("Quiet answer."))
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/notify loud", OWNER)
            await fake.wait_text(OWNER, "Unknown notification policy")
            await fake.user_message("/notify quiet", OWNER)
            await fake.wait_text(OWNER, "Notifications: <b>quiet</b>")
            mark = len(fake.calls)
            await fake.user_message("/detach hush", OWNER)
            await fake.wait_text(OWNER, "Quiet answer.", timeout_s=20)
            task_sends = [c for c in sends(fake, mark) if "#1" in str(c.params.get("text"))]
            assert len(task_sends) == 2 and buzzing(fake, mark) == []


async def test_a_plain_message_is_a_task_and_an_immediate_reply_continues_it(tmp_path, workdir):
    engine = FakeEngine(answer("Plain answer."))
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("x=1 tidy the logs please", OWNER)  # no options here
            ack = await fake.wait_text(OWNER, "#1 x-1-tidy")
            # a reply sent the moment the acknowledgement appears belongs to the task
            await fake.user_message(
                "and rotate them", OWNER, reply_to_message_id=ack.result["message_id"]
            )
            await until(lambda: len(engine.specs) == 2, timeout_s=20)
            assert engine.specs[0].prompt.startswith("x=1 tidy the logs please")
            assert engine.specs[0].nice == 10  # DETACH_AGENT_NICE's default reaches the agent
            assert engine.specs[1].prompt == "and rotate them"
            assert not [c for c in sends(fake) if "does not belong" in str(c.params.get("text"))]
            assert (await app.store.tasks.get(1)).approval_mode.value == "sandbox"


async def test_the_card_lists_new_files_and_small_budgets_read_true(tmp_path, workdir):
    empty_repository(workdir)

    def script(spec: TurnSpec) -> tuple:
        if "explain" in spec.prompt:  # no tool called: the agent changed nothing
            return tuple(e for e in answer("It made a file.") if not isinstance(e, ToolCalled))
        if "look" in spec.prompt:  # only a tool that reads: nothing changed either
            read = ToolCalled("t2", "Read", "added.txt", reads_only=True)
            return tuple(read if isinstance(e, ToolCalled) else e for e in answer("It says new."))
        (spec.cwd / "added.txt").write_text("new\n")
        return answer("Made a file.")

    async with FakeTelegram() as fake:
        engine = FakeEngine(script)
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude make a file", OWNER)
            card = await fake.wait_text(OWNER, "Made a file.", timeout_s=20)
            assert "added.txt | new" in card.params["text"]
            # a turn that called no tool lists no changes: what it changed is nothing, even
            # though the repository still holds the first task's new file
            await fake.user_message("/claude explain it", OWNER)
            card = await fake.wait_text(OWNER, "It made a file.", timeout_s=20)
            assert "Changed" not in card.params["text"] and "added.txt" not in card.params["text"]
            await fake.user_message("/claude look at it", OWNER)
            card = await fake.wait_text(OWNER, "It says new.", timeout_s=20)
            assert "Changed" not in card.params["text"] and "added.txt" not in card.params["text"]
    amounts = (0.0001, 0.000225, 0.03, 2.5, 0.0123, 0.75, 0.999, 0)
    assert [usd(x) for x in amounts] == [
        "0.0001",
        "0.00022",
        "0.03",
        "2.50",
        "0.012",
        "0.75",
        "1.00",
        "0.00",
    ]


async def test_plain_text_can_be_set_to_answer_with_help(tmp_path, workdir):
    engine = FakeEngine(answer("never"))
    async with FakeTelegram() as fake:
        custom = settings(tmp_path, fake, workdir, plain_text="help")
        async with running_bot(custom, {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("tidy the logs", OWNER)
            await fake.wait_text(OWNER, "/detach")
            assert await app.store.tasks.get(1) is None


async def test_after_a_restart_the_notice_and_acknowledgements_follow_the_buttons_used(
    tmp_path, workdir
):
    async with FakeTelegram() as fake:
        waiting = FakeEngine(waits_for_approval())
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": waiting}):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude first job", OWNER)
            await fake.user_message("/claude second job", OWNER)
            await until(lambda: len(waiting.specs) == 2)
        acks = {
            n: next(c for c in sends(fake) if f"#{n} " in c.params["text"]).result["message_id"]
            for n in (1, 2)
        }
        engine = FakeEngine(answer("Resumed fine."))
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            notice = await fake.wait_text(OWNER, "restarted while these tasks were running")
            notice_id = notice.result["message_id"]
            for n in (1, 2):
                await until(lambda n=n: "interrupted" in fake.find_message(OWNER, acks[n])["text"])
                assert buttons_of(fake, acks[n]) == []
            rows = [
                [b["callback_data"] for b in row]
                for row in notice.params["reply_markup"]["inline_keyboard"]
            ]
            assert rows == [["t:resume:1", "t:fail:1"], ["t:resume:2", "t:fail:2"]]
            await fake.press(OWNER, notice_id, "t:resume:1", OWNER)
            await fake.wait_text(OWNER, "Resumed fine.", timeout_s=20)
            await until(lambda: "t:resume:1" not in str(buttons_data(fake, notice_id)))
            assert "t:fail:2" in str(buttons_data(fake, notice_id))
            await fake.press(OWNER, notice_id, "t:fail:2", OWNER)
            await until(lambda: buttons_of(fake, notice_id) == [])  # both rows used
            await until(lambda: "failed" in fake.find_message(OWNER, acks[2])["text"])
            await until(lambda: "done" in fake.find_message(OWNER, acks[1])["text"])
            assert (await app.store.tasks.get(2)).status is TaskStatus.FAILED


async def test_files_go_into_the_task_directory_and_their_paths_reach_the_agent(tmp_path, workdir):
    engine = FakeEngine(answer("Read it."))
    async with FakeTelegram() as fake:
        custom = settings(tmp_path, fake, workdir, max_attachment_mb=1)
        async with running_bot(custom, {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_document(b"a,b\n1,2\n", "data.csv", OWNER, caption="/claude sum it")
            card = await fake.wait_text(OWNER, "Read it.", timeout_s=20)
            first = engine.specs[0].prompt
            assert first.startswith("sum it") and "data.csv" in first
            [saved] = (workdir / ".detach" / "attachments").glob("*-data.csv")
            assert (
                saved.read_bytes() == b"a,b\n1,2\n" and f".detach/attachments/{saved.name}" in first
            )

            await wait_linked(app, OWNER, card.result["message_id"])
            await fake.user_document(
                b"more",
                "../../evil name.txt",
                OWNER,
                caption="and this",
                reply_to_message_id=card.result["message_id"],
            )
            await until(lambda: len(engine.specs) == 2, timeout_s=20)
            [second] = (workdir / ".detach" / "attachments").glob("*-evil_name.txt")
            assert second.read_bytes() == b"more" and second.name in engine.specs[1].prompt

            await fake.user_document(b"x" * (1024 * 1024 + 1), "big.bin", OWNER)
            refusal = await fake.wait_text(OWNER, "big.bin")
            assert "up to 1 MB" in refusal.params["text"]
            await fake.user_document(b"look", "notes.txt", OWNER, caption="look")  # a task too
            await until(lambda: len(engine.specs) == 3, timeout_s=20)
            assert "notes.txt" in engine.specs[2].prompt
            assert len([t for t in await app.store.tasks.list_for(None)]) == 2

            # a refused command keeps no staged copy of its file
            await fake.user_document(b"no", "refused.txt", OWNER, caption="/claude model=nosuch x")
            await fake.wait_text(OWNER, "nosuch")
            await until(lambda: not list(app.uses.create.attachments_staging.iterdir()))


async def test_a_file_sent_as_a_reply_reaches_the_real_model(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-FILE", [{"text": "first"}, {"echo": True}])
    async with FakeTelegram() as fake:
        real = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(real, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude MARK-FILE look", OWNER)
            card = await fake.wait_text(OWNER, "first", timeout_s=60)
            await wait_linked(app, OWNER, card.result["message_id"])
            await fake.user_document(
                b"col\n1\n",
                "report.csv",
                OWNER,
                caption="and this",
                reply_to_message_id=card.result["message_id"],
            )
            await fake.wait_text(OWNER, "ECHO", timeout_s=60)
    [saved] = (workdir / ".detach" / "attachments").glob("*-report.csv")
    last = anthropic.requests_for("MARK-FILE")[-1]["last_user_text"]
    assert f".detach/attachments/{saved.name}" in last and saved.read_bytes() == b"col\n1\n"
