"""Attachments in the chat, end to end through the fake Bot API: the chat shows the user's
words and the files' names (the agent's prompt gets the paths); a file or photo without words
is held and asked about, and starts nothing until a reply with words."""

from __future__ import annotations

import time

from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, running_bot, wait_linked
from tests.test_phone import answer, buttons_data, settings, until


async def test_a_caption_less_photo_asks_and_a_reply_starts_the_task(tmp_path, workdir):
    engine = FakeEngine(answer("A cat."))
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            photo = await fake.user_photo(b"\xff\xd8jpeg", OWNER)
            ask = await fake.wait_text(OWNER, "What should I do with it?")
            question_id = ask.result["message_id"]
            assert "photo.jpg" in ask.params["text"] and ".detach" not in ask.params["text"]
            assert buttons_data(fake, question_id) == [f"h:drop:{photo['message_id']}:0"]
            assert await app.store.tasks.list_for(None) == [] and engine.specs == []
            [held] = (tmp_path / "data" / "held").iterdir()  # kept until the answer
            assert len(list(held.glob("*-photo.jpg"))) == 1

            await fake.user_message("what breed is it?", OWNER, reply_to_message_id=question_id)
            card = await fake.wait_text(OWNER, "A cat.", timeout_s=20)
            [task] = await app.store.tasks.list_for(None)
            assert task.title == "what breed is it? 📎 photo.jpg"
            assert task.slug == "what-breed-is"
            prompt = engine.specs[0].prompt
            assert prompt.startswith("what breed is it?") and ".detach/attachments/" in prompt
            [saved] = (workdir / ".detach" / "attachments").glob("*-photo.jpg")
            assert saved.read_bytes() == b"\xff\xd8jpeg" and saved.name in prompt
            await until(lambda: "#1 what-breed-is" in fake.find_message(OWNER, question_id)["text"])
            assert buttons_data(fake, question_id) == []
            assert not list((tmp_path / "data" / "held").iterdir())

            # Drop forgets a held file; a reply to a dropped one starts nothing
            await fake.user_document(b"x", "notes.txt", OWNER)
            ask = await fake.wait_text(OWNER, "notes.txt")
            await fake.press(
                OWNER,
                ask.result["message_id"],
                buttons_data(fake, ask.result["message_id"])[0],
                OWNER,
            )
            await until(
                lambda: "Dropped" in fake.find_message(OWNER, ask.result["message_id"])["text"]
            )
            await fake.user_message(
                "summarise", OWNER, reply_to_message_id=ask.result["message_id"]
            )
            await fake.wait_text(OWNER, "does not belong to a task")
            # unanswered past the bound: dropped by the clean-up; a late reply is told so
            await fake.user_document(b"y", "late.txt", OWNER)
            late = (await fake.wait_text(OWNER, "late.txt")).result["message_id"]
            assert app.uses.held_files.prune(now=time.time() + app.uses.held_files.hold_s + 1) == 1
            await fake.user_message("summarise", OWNER, reply_to_message_id=late)
            await fake.wait_text(OWNER, "no longer kept")
            assert len(await app.store.tasks.list_for(None)) == 1

            # a command with a file and no words asks too; a reply to the file itself answers
            sent = await fake.user_document(b"1\n2\n", "n.txt", OWNER, caption="/claude")
            ask = await fake.wait_text(OWNER, "n.txt")
            await fake.user_message("count lines", OWNER, reply_to_message_id=sent["message_id"])
            await until(lambda: len(engine.specs) == 2, timeout_s=20)
            second = await app.store.tasks.get(2)
            assert second is not None and second.title == "count lines 📎 n.txt"
            assert engine.specs[1].prompt.startswith("count lines")
            await until(lambda: "#2 " in fake.find_message(OWNER, ask.result["message_id"])["text"])

            # a file without words as a reply to a task asks too; the answer continues that task
            card_id = card.result["message_id"]
            await wait_linked(app, OWNER, card_id)
            mark = len(fake.calls)
            await fake.user_photo(b"\xff\xd8more", OWNER, reply_to_message_id=card_id)
            ask = await fake.wait_text(OWNER, "What should I do with it?", after=mark)
            assert buttons_data(fake, ask.result["message_id"])[0].endswith(":1")  # task #1
            assert len(engine.specs) == 2
            ask_id = ask.result["message_id"]
            await fake.user_message("and this one?", OWNER, reply_to_message_id=ask_id)
            await until(lambda: len(engine.specs) == 3, timeout_s=20)
            third = engine.specs[2]
            assert third.task_id == 1 and third.prompt.startswith("and this one?")
            assert "photo.jpg" in third.prompt and len(await app.store.tasks.list_for(None)) == 2


async def test_a_captioned_file_is_acknowledged_with_its_words_and_name(tmp_path, workdir):
    engine = FakeEngine(answer("Summed."))
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            await fake.user_document(b"a,b\n1,2\n", "data.csv", OWNER, caption="/claude sum it")
            ack = await fake.wait_text(OWNER, "#1 ")
            await fake.wait_text(OWNER, "Summed.", timeout_s=20)
            shown = fake.find_message(OWNER, ack.result["message_id"])["text"]
            assert "sum it" in shown and "data.csv" in shown
            assert ".detach" not in shown and "Attached by the user" not in shown


async def test_held_files_older_than_the_bound_are_dropped(tmp_path):
    import os

    from bot.telegram.held import Held, HeldFiles

    held = HeldFiles(tmp_path / "held", hold_s=60)
    staged = tmp_path / "abc123-a.txt"
    staged.write_text("a")
    kept = held.hold(1, 10, 5, Held([staged], "", "", None, "en"))
    assert await held.take(1, 10, 6) is None  # somebody else's
    assert [p.name for p in (await held.take(1, 10, 5)).files] == ["abc123-a.txt"]  # type: ignore[union-attr]
    assert held.prune() == 0
    os.utime(kept, (0, 0))
    assert held.prune() == 1 and await held.take(1, 10, 5) is None
