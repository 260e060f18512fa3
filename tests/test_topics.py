"""A topic per task, through the real bot over HTTP against the fake Bot API with forum topics:
every message of a task goes to its topic, a message in the topic continues the task,
archiving closes the topic (renames it in a private chat), a forum group with
DETACH_TOPICS=project shares one topic per directory, a topic that is gone or cannot be opened
never loses a message, and without topics no message names a thread."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer

from bot.mcp.handoff import taken
from bot.models import NewTask, OutboxOp, TaskKind, TaskStatus, TopicMode, TurnSpec
from bot.store import Store
from bot.store.outbox import OutboxRow
from bot.tasks.taskfile import TaskFile, drop
from bot.telegram.texts import Texts
from bot.telegram.topics import Topics
from tests.support.fake_engine import FakeEngine
from tests.support.fake_forum import FakeForum
from tests.support.fake_telegram import TOKEN, Call, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_phone import SESSION, answer, buttons_data, waits_for_approval

GROUP = -100777
FRIEND = 222  # allowed too, but not the owner of the tasks in the group
STRANGER = 333  # not allowed


def settings(tmp_path: Path, fake: FakeTelegram, workdir: Path, **overrides: object) -> Any:
    return make_settings(tmp_path / "data", fake, "claude", workdir, **overrides)


def script(spec: TurnSpec) -> tuple:
    return waits_for_approval() if "wait" in spec.prompt else answer(f"Did: {spec.prompt}.")


def task_sends(fake: FakeTelegram, chat_id: int, label: str) -> list[Call]:
    """Every message the bot sent about a task (its label is in each of them)."""
    return [
        c
        for c in fake.calls
        if c.ok
        and c.method in ("sendMessage", "sendDocument")
        and int(c.params["chat_id"]) == chat_id
        and label in str(c.params.get("text") or c.params.get("caption"))
    ]


def thread_of(call: Call) -> int | None:
    value = call.params.get("message_thread_id")
    return int(value) if value is not None else None


async def test_a_task_keeps_its_messages_in_its_topic_and_the_topic_continues_it(tmp_path, workdir):
    engine = FakeEngine(script)
    async with FakeForum(private_topics=True) as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude wait for me", OWNER)
            opened = await fake.wait_call("createForumTopic")
            assert opened.params["name"] == "#1 wait-me"
            thread = int(opened.result["message_thread_id"])
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=20)
            allow = next(d for d in buttons_data(fake, ask.result["message_id"]) if "allow" in d)
            await fake.press(OWNER, ask.result["message_id"], allow, OWNER)
            await fake.wait_text(OWNER, "after the approval", timeout_s=20)
            # a plain message in the topic, replying to nothing: the same task goes on
            mark = len(fake.calls)
            await fake.user_message("and now the docs", OWNER, thread_id=thread)
            await fake.wait_text(OWNER, "Did: and now the docs.", timeout_s=20, after=mark)
            assert [s.task_id for s in engine.specs] == [1, 1]
            assert engine.specs[1].prompt == "and now the docs"
            assert engine.specs[1].resume_session_id == SESSION
            # a task's file goes to its topic, whichever chat asked for it
            await fake.user_message("/export 1", OWNER)
            exported = await fake.wait_call("sendDocument", after=mark)
            assert thread_of(exported) == thread
            # a command without a number in the topic means the topic's task
            asked = len(fake.calls)
            await fake.user_message("/result", OWNER, thread_id=thread)
            result = await fake.wait_text(OWNER, "Did: and now the docs.", after=asked)
            assert thread_of(result) == thread
            # an answer to a command in the topic is said there too
            await fake.user_message("/archive", OWNER, thread_id=thread)
            archived = await fake.wait_text(OWNER, "Archived", after=mark)
            assert thread_of(archived) == thread
            renamed = await fake.wait_call("editForumTopic")
            assert renamed.params["name"] == "🗄 #1 wait-me · archived"
            assert fake.topics[(OWNER, thread)]["name"] == "🗄 #1 wait-me · archived"
            assert await app.outbox.idle(10)
            sent = task_sends(fake, OWNER, "#1 wait-me")
            kinds = " ".join(str(c.params.get("text")) for c in sent)
            assert "wants to use" in kinds and "Did: and now the docs." in kinds
            assert "sendDocument" in [c.method for c in sent]
            assert len(sent) >= 5  # acknowledgement, approval, two cards, a file…
            assert {thread_of(c) for c in sent} == {thread}  # …each of them in the topic
            assert len(fake.in_topic(OWNER, thread)) >= len(sent)
            assert not [c for c in fake.calls if c.method == "closeForumTopic"]
            assert [c.method for c in fake.calls].count("createForumTopic") == 1
            assert (await app.store.tasks.get(1)).status is TaskStatus.ARCHIVED


async def test_without_topics_no_message_names_a_thread(tmp_path, workdir):
    engine = FakeEngine(script)
    async with FakeForum(private_topics=False) as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude plain chat", OWNER)
            card = await fake.wait_text(OWNER, "Did: plain chat.", timeout_s=20)
            await fake.user_message("more", OWNER, reply_to_message_id=card.result["message_id"])
            await fake.wait_text(OWNER, "Did: more.", timeout_s=20)
            await fake.user_message("/archive 1", OWNER)
            await fake.wait_text(OWNER, "Archived")
            assert not [c for c in fake.calls if "message_thread_id" in c.params]
            assert not [c for c in fake.calls if "ForumTopic" in c.method]


async def test_topics_off_keeps_the_chat(tmp_path, workdir):
    engine = FakeEngine(script)
    async with FakeForum(private_topics=True) as fake:
        config = settings(tmp_path, fake, workdir, topics="off")
        async with running_bot(config, {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude stay here", OWNER)
            await fake.wait_text(OWNER, "Did: stay here.", timeout_s=20)
            assert not [c for c in fake.calls if "message_thread_id" in c.params]
            assert not [c for c in fake.calls if c.method == "createForumTopic"]


async def test_a_forum_group_shares_a_topic_per_directory_and_only_the_owner_continues(
    tmp_path, workdir
):
    engine = FakeEngine(script)
    async with FakeForum(private_topics=False, forums=[GROUP]) as fake:
        config = settings(
            tmp_path, fake, workdir, topics="project", allowed_users=frozenset({OWNER, FRIEND})
        )
        async with running_bot(config, {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude first job", OWNER, chat_id=GROUP)
            await fake.wait_text(GROUP, "Did: first job.", timeout_s=20)
            await fake.user_message("/claude second job", OWNER, chat_id=GROUP)
            await fake.wait_text(GROUP, "Did: second job.", timeout_s=20)
            (opened,) = [c for c in fake.calls if c.method == "createForumTopic"]
            assert opened.params["name"] == f"📁 {workdir.name}"
            thread = int(opened.result["message_thread_id"])
            sent = task_sends(fake, GROUP, "#1 first-job") + task_sends(fake, GROUP, "#2 second")
            assert len(sent) >= 4 and {thread_of(c) for c in sent} == {thread}
            # in the shared topic a message continues the newest task
            mark = len(fake.calls)
            await fake.user_message("go on", OWNER, chat_id=GROUP, thread_id=thread)
            await fake.wait_text(GROUP, "Did: go on.", timeout_s=20, after=mark)
            assert engine.specs[-1].task_id == 2
            # somebody else (allowed here, but not the owner) cannot continue it
            runs, mark = len(engine.specs), len(fake.calls)
            await fake.user_message("mine now", FRIEND, chat_id=GROUP, thread_id=thread)
            refused = await fake.wait_text(GROUP, "No task #2 of yours", after=mark)
            assert thread_of(refused) == thread
            # and a stranger's message does nothing at all
            mark = len(fake.calls)
            await fake.user_message("let me in", STRANGER, chat_id=GROUP, thread_id=thread)
            await fake.user_message("/tasks", OWNER, chat_id=GROUP, thread_id=thread)
            await fake.wait_text(GROUP, "Your tasks", after=mark)
            assert await app.outbox.idle(10)
            said = [c for c in fake.calls[mark:] if c.method == "sendMessage"]
            assert len(said) == 1 and len(engine.specs) == runs
            # the topic closes when its last task is archived
            await fake.user_message("/archive 1", OWNER, chat_id=GROUP)
            await fake.wait_text(GROUP, "Archived", after=mark)
            assert await app.outbox.idle(10)
            assert not [c for c in fake.calls if c.method == "closeForumTopic"]
            await fake.user_message("/archive 2", OWNER, chat_id=GROUP)
            closed = await fake.wait_call("closeForumTopic")
            assert int(closed.params["message_thread_id"]) == thread
            assert fake.topics[(GROUP, thread)]["closed"]


async def test_a_deleted_topic_or_one_that_cannot_be_opened_loses_nothing(tmp_path, workdir):
    engine = FakeEngine(script)
    async with FakeForum(private_topics=False, forums=[GROUP]) as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            # no right to manage topics: the task stays in the chat
            fake.fail_next("createForumTopic", 400, "Bad Request: not enough rights")
            await fake.user_message("/claude no rights", OWNER, chat_id=GROUP)
            await fake.wait_text(GROUP, "Did: no rights.", timeout_s=20)
            assert not [c for c in task_sends(fake, GROUP, "#1 no-rights") if thread_of(c)]
            # a topic the owner deleted: the task's next message comes to the chat
            await fake.user_message("/claude in a topic", OWNER, chat_id=GROUP)
            first = await fake.wait_text(GROUP, "Did: in a topic.", timeout_s=20)
            thread = thread_of(first)
            assert thread is not None
            fake.delete_topic(GROUP, thread)
            mark = len(fake.calls)
            await fake.user_message("/result 2", OWNER, chat_id=GROUP)
            again = await fake.wait_text(GROUP, "Did: in a topic.", after=mark)
            (refused,) = [
                c for c in fake.calls[mark:] if not c.ok and "thread not found" in str(c.result)
            ]
            assert thread_of(refused) == thread and thread_of(again) is None
            assert await app.outbox.idle(10)
            # the only send Telegram refused is the one sent again to the chat (an edit of a
            # message deleted with its topic is refused too, and given up: it is gone)
            failed = [c for c in fake.calls[mark:] if c.method == "sendMessage" and not c.ok]
            assert failed == [refused]
            assert (await app.store.topics.tasks_in(GROUP, thread)) == []  # forgotten


async def test_whether_a_chat_has_topics_is_asked_again_for_the_next_task(tmp_path):
    """The delivery's topic service against the fake over HTTP, with a real store: the answer
    of ``getMe`` is kept for ``recheck_s``; a task's place, once decided, stays."""
    async with FakeForum(private_topics=False) as fake:
        store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite")
        bot = Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(fake.base_url)))
        try:

            async def row_of(prompt: str) -> OutboxRow:
                new = NewTask(OWNER, OWNER, "claude", TaskKind.SESSION, prompt, tmp_path)
                task, _ = await store.tasks.create(new, prompt)
                return OutboxRow(task.id, OWNER, OutboxOp.SEND, {"text": prompt}, task.id, "ack", 0)

            cached = Topics(store, bot, Texts(), TopicMode.TASK)
            asking = Topics(store, bot, Texts(), TopicMode.TASK, recheck_s=0.0)
            first = await row_of("one")
            assert await asking.thread_for(first) == (None, False)
            fake.private_topics = True  # the owner turns topics on
            assert await asking.thread_for(first) == (None, False)  # its place was decided
            second = await row_of("two")
            thread, opened = await asking.thread_for(second)
            assert opened and (OWNER, thread) in fake.topics
            assert await asking.thread_for(second) == (thread, False)  # opened once
            fake.private_topics = False  # and off again: the next task stays in the chat
            assert await asking.thread_for(await row_of("three")) == (None, False)
            fake.private_topics = True
            asks = [c.method for c in fake.calls].count("getMe")
            assert (await cached.thread_for(await row_of("four")))[1]
            fake.private_topics = False  # turned off meanwhile, not asked again yet:
            refused = await cached.thread_for(await row_of("five"))
            assert refused == (None, False)  # Telegram refuses the topic; the chat
            assert [c.method for c in fake.calls].count("getMe") == asks + 1
            assert not fake.calls[-1].ok and fake.calls[-1].method == "createForumTopic"
        finally:
            await bot.session.close()
            await store.close()


async def test_plain_text_in_a_topic_no_task_opened_starts_a_task(tmp_path, workdir):
    """Telegram makes a message in a topic "reply" to the topic's first message; in a topic of
    the owner's own (no task's) that is a plain message, which starts a task as in the chat."""
    engine = FakeEngine(script)
    async with FakeForum(private_topics=True) as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            own = await fake._m_createForumTopic({"chat_id": OWNER, "name": "my notes"})
            thread = int(own["message_thread_id"])
            mark = len(fake.calls)
            await fake.user_message("tidy the notes", OWNER, thread_id=thread)
            await fake.wait_text(OWNER, "Did: tidy the notes.", timeout_s=20, after=mark)
            assert [s.prompt for s in engine.specs] == ["tidy the notes"]
            said = " ".join(str(c.params.get("text")) for c in fake.calls[mark:])
            assert "unrelated" not in said.lower()


async def test_a_sub_task_speaks_in_its_root_tasks_topic(tmp_path, workdir):
    """A tree is one thread: a sub-task (here a task file naming its parent, as `detach mcp`
    drops one) opens no topic of its own; its messages go to its parent's."""
    engine = FakeEngine(script)
    async with FakeForum(private_topics=True) as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude subtasks=yes wait for me", OWNER)
            opened = await fake.wait_call("createForumTopic")
            thread = int(opened.result["message_thread_id"])
            await fake.wait_text(OWNER, "wants to use", timeout_s=20)
            child = TaskFile("child says hi", chat_id=OWNER, parent=1, mode="ask")
            await taken(drop(tmp_path / "data" / "inbox", child, "mcp"), 20)
            done = await fake.wait_text(OWNER, "Did: child says hi.", timeout_s=20)
            assert thread_of(done) == thread
            assert thread_of(await fake.wait_text(OWNER, "#2 child-says")) == thread
            assert [c.method for c in fake.calls].count("createForumTopic") == 1
