"""`/archive all` of many tasks, through the real bot against the fake Bot API at Telegram's own
pace (one message a second per chat): the answer comes at once, whatever the number of tasks,
and the archived tasks' cards follow in one batch (each message edited once)."""

from __future__ import annotations

import asyncio
import time

from bot.models import NewTask, TaskKind, TaskStatus
from bot.store import Store, TurnOutcome
from bot.telegram.notifier import Notifier
from bot.telegram.outbox import Outbox
from bot.telegram.texts import Texts
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_cli import detach
from tests.test_phone import buttons_of, until

TASKS = 50


async def seed(url: str, workdir, count: int) -> None:  # type: ignore[no-untyped-def]
    """``count`` finished tasks, each with its card (queued: the bot delivers them)."""
    store = await Store.open(url)
    try:
        notifier = Notifier(store, Texts(), Outbox(store))
        for n in range(count):
            new = NewTask(OWNER, OWNER, "claude", TaskKind.DETACH, f"job {n}", workdir)
            task, turn = await store.tasks.create(new, f"job-{n}")
            outcome = TurnOutcome(TaskStatus.DONE, result_text=f"Answer {n}.", cost_usd=0.01)
            task, turn = await store.tasks.finish_turn(turn, outcome)
            await notifier.turn_finished(task, turn)
    finally:
        await store.close()


async def test_archive_all_of_50_tasks_answers_before_any_card_is_edited(tmp_path, workdir):
    engine = FakeEngine(())
    async with FakeTelegram(flood_burst=1000, flood_per_s=1000) as fake:
        quick = make_settings(tmp_path / "data", fake, "claude", workdir, outbox_chat_interval_s=0)
        await seed(quick.resolved_database_url, workdir, TASKS)
        async with running_bot(quick, {}, {"claude": engine}) as app:
            assert await app.outbox.idle(30)  # every card delivered, with its buttons
        cards = [m["message_id"] for m in fake.bot_messages(OWNER) if "Answer" in m["text"]]
        assert len(cards) == TASKS and all(buttons_of(fake, card) for card in cards)
        paced = make_settings(tmp_path / "data", fake, "claude", workdir, outbox_chat_interval_s=1)
        async with running_bot(paced, {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            mark, began = len(fake.calls), time.monotonic()
            await fake.user_message("/archive all", OWNER)
            answer = await fake.wait_text(OWNER, f"Archived {TASKS} tasks", 10, after=mark)
            took_s = answer.at - began
            # at once, whatever the number: before any archived card is edited (paced, the 50
            # edits take 50 s; alone the answer takes ~0.1 s, and a loaded whole run once 2.2)
            before = fake.calls[mark : fake.calls.index(answer)]
            assert not [c for c in before if c.method.startswith("editMessage")], took_s
            assert took_s < 5.0, took_s
            assert (await app.store.tasks.get(TASKS)).status is TaskStatus.ARCHIVED
            await until(lambda: buttons_of(fake, cards[-1]) == [], 10)  # the newest card first
            assert "archived" in fake.find_message(OWNER, cards[-1])["text"]
            edits = [c for c in fake.calls[mark:] if c.method.startswith("editMessage")]
            assert len({int(c.params["message_id"]) for c in edits}) == len(edits)  # once each


async def test_the_shells_archive_all_edits_the_cards_as_the_chats_does(tmp_path, workdir):
    """`detach archive --all` (another door) keeps `/archive all`'s rule: one statement, and
    the archived tasks' cards lose their buttons and say so, delivered by the running bot."""
    engine = FakeEngine(())
    async with FakeTelegram(flood_burst=1000, flood_per_s=1000) as fake:
        quick = make_settings(tmp_path / "data", fake, "claude", workdir, outbox_chat_interval_s=0)
        await seed(quick.resolved_database_url, workdir, 3)
        async with running_bot(quick, {}, {"claude": engine}) as app:
            assert await app.outbox.idle(30)
            cards = [m["message_id"] for m in fake.bot_messages(OWNER) if "Answer" in m["text"]]
            assert len(cards) == 3 and all(buttons_of(fake, card) for card in cards)
            done = await asyncio.to_thread(detach, tmp_path, "archive", "--all")
            assert done.returncode == 0 and "archived 3 tasks" in done.stdout, done.stderr
            for card in cards:
                await until(lambda card=card: buttons_of(fake, card) == [], 10)
                assert "archived" in fake.find_message(OWNER, card)["text"]
            assert (await app.store.tasks.get(3)).status is TaskStatus.ARCHIVED
