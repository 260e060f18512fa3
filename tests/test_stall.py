"""The stall watchdog, end to end through the real bot and the fake Bot API, with an engine
that replays a stream and falls silent where the script says (``Pause``; the threshold is set
to a fraction of a second): one message naming the state, Stop ends the turn, Keep waiting
silences it for the turn, a new state speaks once more, and a turn waiting on an approval gets
none. On scale-out the watchdog speaks from the worker that runs the turn and both its buttons
work when tapped at the bot (the turn, and the owner's answer, are in the shared store)."""

from __future__ import annotations

import asyncio

from bot.approvals.stalls import StallAction, StallChoice, stall_keyboard
from bot.events import ApprovalRequest, SessionStarted, ToolCalled, ToolFinished
from bot.models import MessageKind, TaskStatus
from bot.store import Store
from bot.store.schema import tasks, turns
from bot.store.stalls import StallNotice
from bot.turns.stall import StallWatch
from tests.support.fake_engine import FakeEngine, Pause, Until
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, worker_in_own_task
from tests.support.postgres import postgres_database
from tests.support.workers import runner_of, wait_until
from tests.test_approvals_e2e import OTHER, answer_of, buttons, edited
from tests.test_phone import SESSION, answer, buttons_data, buzzing, settings, until

STALLED = ("no word from the agent", "has said nothing", "has not exited")


def stall_messages(fake: FakeTelegram) -> list:
    return [
        c
        for c in fake.calls
        if c.method == "sendMessage" and any(s in str(c.params.get("text", "")) for s in STALLED)
    ]


async def status_of(app, task_id: int, status: TaskStatus, timeout_s: float = 20) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while (await app.store.tasks.get(task_id)).status is not status:
            await asyncio.sleep(0.05)


async def test_a_silent_model_gets_one_message_and_stop_ends_the_turn(tmp_path, workdir):
    engine = FakeEngine((SessionStarted(SESSION, "fake-model"), Pause(60), *answer("never")[1:]))
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir, stall_s=0.3), {}, {"claude": engine}
        ) as app:
            mark = len(fake.calls)
            await fake.user_message("/detach think hard", OWNER)
            said = await fake.wait_text(OWNER, "has said nothing", timeout_s=20)
            assert "#1 think-hard" in said.params["text"]
            assert set(buttons(said)) == {"⏹ Stop", "Keep waiting"}
            await asyncio.sleep(1.2)  # four thresholds more of the same silence
            assert len(stall_messages(fake)) == 1
            q = await fake.press(OWNER, said.result["message_id"], buttons(said)["⏹ Stop"], OWNER)
            assert "#1" in await answer_of(fake, q)
            await status_of(app, 1, TaskStatus.CANCELLED)
            over = await edited(fake, said.result["message_id"], "has ended since")
            assert "reply_markup" not in over.params  # no Stop left on a finished turn
            assert len(stall_messages(fake)) == 1
            assert len(buzzing(fake, mark)) <= 2


async def test_keep_waiting_silences_the_turn_and_a_tool_is_named(tmp_path, workdir):
    script = (
        SessionStarted(SESSION, "fake-model"),
        ToolCalled("t1", "Bash", "sleep 600 && make <all>"),
        Pause(3),  # time enough to tap Keep waiting
        ToolFinished("t1", False, "built"),
        Pause(1.2),  # a new state (the model quiet): silenced too
        *answer("built it")[1:],
    )
    engine = FakeEngine(script)
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir, stall_s=0.3, allowed_users=frozenset({OWNER, OTHER})),
            {},
            {"claude": engine},
        ) as app:
            await fake.user_message("/detach build all", OWNER)
            said = await fake.wait_text(OWNER, "no word from the agent", timeout_s=20)
            assert "sleep 600 &amp;&amp; make &lt;all&gt;" in said.params["text"]  # escaped
            assert "at work for 1 s:" in said.params["text"]  # the time it measured, not "1 min"
            keep, stop = buttons(said)["Keep waiting"], buttons(said)["⏹ Stop"]
            for choice in (keep, stop):  # somebody else's taps: refused
                q = await fake.press(OWNER, said.result["message_id"], choice, OTHER)
                said_to_other = await answer_of(fake, q)
                assert "not your task" in said_to_other or "of yours" in said_to_other
            q = await fake.press(OWNER, said.result["message_id"], keep, OWNER)
            assert await answer_of(fake, q) == "No more word about this turn"
            await edited(fake, said.result["message_id"], "no more word about this turn")
            await fake.wait_text(OWNER, "built it", timeout_s=20)
            await status_of(app, 1, TaskStatus.DONE)
            assert len(stall_messages(fake)) == 1
            q = await fake.press(OWNER, said.result["message_id"], keep, OWNER)
            assert "no longer valid" in await answer_of(fake, q)


async def test_each_new_state_speaks_once(tmp_path, workdir):
    script = (
        SessionStarted(SESSION, "fake-model"),
        ToolCalled("t1", "Bash", "make"),
        Pause(1.2),
        ToolFinished("t1", False, "built"),
        Pause(1.2),
        *answer("done at last")[1:],
    )
    engine = FakeEngine(script)
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir, stall_s=0.3), {}, {"claude": engine}
        ) as app:
            await fake.user_message("/detach make it", OWNER)
            tool = await fake.wait_text(OWNER, "no word from the agent", timeout_s=20)
            model = await fake.wait_text(OWNER, "has said nothing", timeout_s=20)
            # the earlier state's message loses its buttons: one live Stop at a time
            await edited(fake, tool.result["message_id"], "no word from the agent")
            await fake.wait_text(OWNER, "done at last", timeout_s=20)
            await status_of(app, 1, TaskStatus.DONE)
            await edited(fake, model.result["message_id"], "has ended since")
            assert len(stall_messages(fake)) == 2


async def test_a_turn_waiting_on_an_approval_gets_no_watchdog(tmp_path, workdir):
    asks = ApprovalRequest("Bash", {"command": "make deploy"}, "t1", "Bash(make deploy)")
    engine = FakeEngine((SessionStarted(SESSION, "fake-model"), asks, *answer("deployed")[1:]))
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir, stall_s=0.3), {}, {"claude": engine}
        ) as app:
            await fake.user_message("/detach deploy", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=20)
            await asyncio.sleep(1.5)  # five thresholds, waiting on the owner
            assert stall_messages(fake) == []
            await fake.press(OWNER, ask.result["message_id"], buttons(ask)["✅ Allow"], OWNER)
            await fake.wait_text(OWNER, "deployed", timeout_s=20)
            await status_of(app, 1, TaskStatus.DONE)
            await until(lambda: engine.decisions == [True])
            assert stall_messages(fake) == []


async def test_an_agent_that_answered_but_does_not_exit_is_named(tmp_path, workdir):
    """The verdict is in (the card is sent) and the agent's stream goes on: its process has
    not exited. The executor bounds that wait itself (Claude: DETACH_CANCEL_GRACE_S)."""
    engine = FakeEngine((*answer("answered")[:], Pause(1.5)))
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir, stall_s=0.3), {}, {"claude": engine}
        ) as app:
            await fake.user_message("/detach answer me", OWNER)
            await fake.wait_text(OWNER, "answered", timeout_s=20)
            said = await fake.wait_text(OWNER, "has not exited", timeout_s=20)
            await edited(fake, said.result["message_id"], "has ended since")
            assert len(stall_messages(fake)) == 1
            assert (await app.store.tasks.get(1)).status is TaskStatus.DONE


async def test_the_real_claude_waiting_on_a_silent_model_is_stopped(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """The scripted model starts its answer and says nothing more: the real CLI is quiet, the
    watchdog names the model, and Stop ends the turn (the CLI is stopped as /cancel does)."""
    anthropic.script("MARK-QUIET", [{"stall": 30}])
    async with FakeTelegram() as fake:
        async with running_bot(
            make_settings(tmp_path / "data", fake, claude_bin, workdir, stall_s=1), agent_env
        ) as app:
            await fake.user_message("/claude MARK-QUIET think", OWNER)
            said = await fake.wait_text(OWNER, "has said nothing", timeout_s=60)
            await asyncio.sleep(2)  # the same silence: no second message
            assert len(stall_messages(fake)) == 1
            await fake.press(OWNER, said.result["message_id"], buttons(said)["⏹ Stop"], OWNER)
            await status_of(app, 1, TaskStatus.CANCELLED, timeout_s=60)
            await edited(fake, said.result["message_id"], "has ended since")


async def test_a_long_wait_on_the_owner_is_no_stall_after_the_answer(tmp_path, workdir):
    """An approval waits longer than the threshold, with a tool open; the owner allows and the
    agent is quiet a while less than the threshold: no watchdog message (the owner's wait is
    not the agent's silence, neither the model's nor the tool's)."""
    stall_s = 2.0
    asks = ApprovalRequest("Bash", {"command": "make deploy"}, "t1", "Bash(make deploy)")
    script = (
        SessionStarted(SESSION, "fake-model"),
        ToolCalled("t1", "Bash", "make deploy"),
        asks,
        Pause(0.8 * stall_s),  # the tool at work after the answer: under the threshold
        ToolFinished("t1", False, "deployed"),
        *answer("deployed it")[1:],
    )
    engine = FakeEngine(script)
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir, stall_s=stall_s), {}, {"claude": engine}
        ) as app:
            await fake.user_message("/detach deploy", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=20)
            await asyncio.sleep(1.3 * stall_s)  # the owner takes longer than the threshold
            assert stall_messages(fake) == []
            await fake.press(OWNER, ask.result["message_id"], buttons(ask)["✅ Allow"], OWNER)
            await fake.wait_text(OWNER, "deployed it", timeout_s=20)
            await status_of(app, 1, TaskStatus.DONE)
            assert engine.decisions == [True]
            assert stall_messages(fake) == []


async def test_stop_works_where_no_watchdog_spoke(tmp_path, workdir):
    """Stop tapped on a process that holds nothing of the turn's watchdog (on scale-out the
    watchdog lives in the worker, the tap reaches the bot): the turn is found in the store,
    and only its owner's tap, while it runs, cancels it."""
    engine = FakeEngine((SessionStarted(SESSION, "fake-model"), Pause(60), *answer("never")[1:]))
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir, stall_s=600, allowed_users=frozenset({OWNER, OTHER})),
            {},
            {"claude": engine},
        ) as app:
            await fake.user_message("/detach think hard", OWNER)
            await until(lambda: any(c.method == "sendMessage" for c in fake.calls))
            await status_of(app, 1, TaskStatus.RUNNING)
            turn = await app.store.tasks.last_turn(1)
            where = next(c for c in fake.calls if c.method == "sendMessage").result["message_id"]
            stop = StallAction(turn_id=turn.id, choice=StallChoice.STOP).pack()
            q = await fake.press(OWNER, where, stop, OTHER)
            assert "not your task" in await answer_of(fake, q)
            assert (await app.store.tasks.get(1)).status is TaskStatus.RUNNING
            q = await fake.press(OWNER, where, stop, OWNER)
            assert "#1" in await answer_of(fake, q)
            await status_of(app, 1, TaskStatus.CANCELLED)
            q = await fake.press(OWNER, where, stop, OWNER)  # the turn has ended: stale
            assert "no longer valid" in await answer_of(fake, q)


async def test_keep_waiting_tapped_at_the_bot_silences_a_workers_watchdog(tmp_path, workdir):
    """The turn runs on a worker (beside the front bot, on one PostgreSQL database); its
    watchdog speaks from there, and Keep waiting is tapped at the bot, which holds nothing of
    that watchdog: the answer is stored and the message edited there, a second tap is told it
    was answered, the worker's watchdog reads the answer before it would speak of a new state
    (the model quiet) and says nothing, the turn's end leaves the message as the answer made
    it, and a tap after the end is stale."""
    tapped = asyncio.Event()
    script = (
        SessionStarted(SESSION, "fake-model"),
        ToolCalled("t1", "Bash", "make all"),
        Until(tapped),
        ToolFinished("t1", False, "built"),
        Pause(1.2),  # a new state (the model quiet), four thresholds long
        *answer("built it")[1:],
    )
    engine = FakeEngine(script)
    async with postgres_database() as url, FakeTelegram() as fake:
        front = settings(tmp_path, fake, workdir, role="front", database_url=url)
        beside = settings(tmp_path / "w1", fake, workdir, database_url=url, stall_s=0.3)
        async with (
            running_bot(front, {}, {"claude": engine}) as app,
            worker_in_own_task(beside, "w1", {"claude": engine}),
        ):
            await fake.user_message("/detach build all", OWNER)
            said = await fake.wait_text(OWNER, "no word from the agent", timeout_s=30)
            assert str(await runner_of(app.store, 1)).startswith("w1@")
            where, keep = said.result["message_id"], buttons(said)["Keep waiting"]
            q = await fake.press(OWNER, where, keep, OWNER)
            assert await answer_of(fake, q) == "No more word about this turn"
            await edited(fake, where, "no more word about this turn")
            q = await fake.press(OWNER, where, keep, OWNER)
            assert await answer_of(fake, q) == "Waiting already: no more word about this turn"
            tapped.set()
            await fake.wait_text(OWNER, "built it", timeout_s=30)
            await status_of(app, 1, TaskStatus.DONE)
            turn = await app.store.tasks.last_turn(1)
            await wait_until(lambda: _closed(app, turn.id), timeout_s=10)  # the watch ended
            await wait_until(lambda: _delivered(app), timeout_s=10)  # and what it queued went
            q = await fake.press(OWNER, where, keep, OWNER)
            assert "no longer valid" in await answer_of(fake, q)
            assert len(stall_messages(fake)) == 1
            edits = [
                c
                for c in fake.calls
                if c.method == "editMessageText" and int(c.params["message_id"]) == where
            ]
            assert not [c for c in edits if "has ended since" in c.params["text"]]


async def _closed(app, turn_id: int) -> bool:  # type: ignore[no-untyped-def]
    return await app.store.stalls.get(turn_id) is None


async def _delivered(app) -> bool:  # type: ignore[no-untyped-def]
    return await app.store.outbox.count("pending") == 0


async def test_an_old_runs_end_leaves_the_running_watchdogs_message(tmp_path, workdir):
    """A process that lost the turn ends its watch while the turn runs on, and the runner's
    watchdog has spoken: its message keeps its buttons, says nothing of an end, and Keep
    waiting tapped there still works (main's old watch deleted the turn's message and edited
    it to "has ended since", and the tap then found nothing)."""
    tapped = asyncio.Event()
    script = (SessionStarted(SESSION, "fake-model"), Until(tapped), *answer("thought")[1:])
    engine = FakeEngine(script)
    async with FakeTelegram() as fake:
        async with running_bot(
            settings(tmp_path, fake, workdir, stall_s=0.3), {}, {"claude": engine}
        ) as app:
            await fake.user_message("/detach think hard", OWNER)
            said = await fake.wait_text(OWNER, "has said nothing", timeout_s=20)
            task, turn = await app.store.tasks.get(1), await app.store.tasks.last_turn(1)
            old = StallWatch(
                notifier=app.core.notifier,
                store=app.store,
                task=task,
                turn_id=turn.id,
                after_s=60,
                asking=lambda: False,
            )
            old.start()
            await old.close()  # the lost run's end, while the turn runs here
            assert await app.store.stalls.get(turn.id) is not None
            where = said.result["message_id"]
            q = await fake.press(OWNER, where, buttons(said)["Keep waiting"], OWNER)
            assert await answer_of(fake, q) == "No more word about this turn"
            tapped.set()
            await fake.wait_text(OWNER, "thought", timeout_s=20)
            await status_of(app, 1, TaskStatus.DONE)
            assert await app.outbox.idle(10)
            texts = [
                c.params["text"]
                for c in fake.calls
                if c.method == "editMessageText" and int(c.params["message_id"]) == where
            ]
            assert not [t for t in texts if "has ended since" in t]


async def test_a_restart_closes_the_stall_message_of_the_turn_it_interrupts(tmp_path, workdir):
    """The process died while its watchdog's message stood (the turn running, the message
    with Stop and Keep waiting, as a kill -9 leaves them): the next start interrupts the turn
    and that message loses its buttons and says the turn has ended; nothing of it is left in
    the store (main left both buttons live under a turn nobody runs)."""
    engine = FakeEngine((SessionStarted(SESSION, "fake-model"), Until(asyncio.Event())))
    async with FakeTelegram() as fake:
        config = settings(tmp_path, fake, workdir)
        async with running_bot(config, {}, {"claude": engine}) as app:
            await fake.user_message("/detach think hard", OWNER)
            await until(lambda: len(engine.specs) == 1)  # the turn runs
            said, turn_id = await _spoke_as_a_watchdog(app)
        store = await Store.open(config.resolved_database_url)
        try:  # the turn as a kill -9 leaves it: running (this one stopped cleanly)
            async with store.engine.begin() as conn:
                await conn.execute(turns.update().values(status=TaskStatus.RUNNING.value))
                await conn.execute(tasks.update().values(status=TaskStatus.RUNNING.value))
        finally:
            await store.close()
        assert len(buttons_data(fake, said)) == 2  # Stop and Keep waiting, live
        mark = len(fake.calls)
        async with running_bot(config, {}, {"claude": engine}) as app:
            await fake.wait_text(OWNER, "restarted while these tasks were running", after=mark)
            closed = await edited(fake, said, "has ended since", mark, timeout_s=10)
            assert "reply_markup" not in closed.params
            assert await app.store.stalls.get(turn_id) is None
            assert (await app.store.tasks.get(1)).status is TaskStatus.INTERRUPTED


async def test_a_takeover_closes_the_stall_message_of_the_dead_runners_turn(tmp_path, workdir):
    """A runner died while its watchdog's message stood: taking its turns over interrupts the
    turn, and that message loses Stop and Keep waiting and says the turn has ended, its row
    gone (PostgreSQL; main left both buttons live)."""
    async with postgres_database() as url, FakeTelegram() as fake:
        front = settings(
            tmp_path, fake, workdir, role="front", database_url=url, worker_lease_s=600
        )
        async with running_bot(front, {}, {"claude": FakeEngine(answer("never"))}) as app:
            await fake.user_message("/detach think hard", OWNER)
            await fake.wait_text(OWNER, "#1 think-hard", timeout_s=20)
            turn = await app.store.tasks.last_turn(1)
            await app.store.runners.register("gone", "w9", "h", "worker", 30)
            assert await app.store.claims.claim_turn(turn.id, "gone") is not None
            said, turn_id = await _spoke_as_a_watchdog(app)
            mark = len(fake.calls)
            assert app.core.shared is not None
            (taken,) = await app.core.shared.takeover.take("gone", dead=True)
            assert taken.status is TaskStatus.INTERRUPTED
            closed = await edited(fake, said, "has ended since", mark, timeout_s=10)
            assert "reply_markup" not in closed.params
            assert await app.store.stalls.get(turn_id) is None


async def _spoke_as_a_watchdog(app) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """What a watchdog's message leaves (``StallWatch._speak``): the message with its buttons
    and its row in the store; returns its message id and the turn's id."""
    task = await app.store.tasks.get(1)
    turn = await app.store.tasks.last_turn(1)
    notifier = app.core.notifier
    text = notifier.text(task.locale, "stall.model", label=task.label, elapsed="1 min")
    markup = stall_keyboard(notifier.texts, task.locale, turn.id)
    async with app.store.atomic():
        row_id = await notifier.send(task, text, MessageKind.STATUS, markup=markup)
        await app.store.stalls.spoke(StallNotice(turn.id, task.chat_id, row_id, text))
    assert await app.outbox.idle(10)
    said_id = await app.store.outbox.message_id_of(row_id)
    return said_id, turn.id
