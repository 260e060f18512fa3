"""The fast tier of steering: the inbox's contract, and the real bot (its service, runner, drive,
notifier and outbox) with engines that take no steer — what the owner is told, and that the
follow-up runs exactly once, as its own turn, whatever the timing."""

from __future__ import annotations

import asyncio

import pytest

from bot.errors import TaskNotFound
from bot.events import Steer, TurnFinished, Usage
from bot.models import NewTask, Phrase, TaskKind, TaskStatus, Turn
from bot.tasks.followup import FollowUp
from bot.tasks.steering import SteerAnswer
from bot.telegram.callbacks import SteerChoice
from bot.turns.steering import SteerBoard, SteerBox
from tests.support.harness import app_in_own_task
from tests.support.recording_session import RecordingSession
from tests.test_fake_engine import SESSION, _settings
from tests.test_handlers import OWNER

STRANGER = 4242


def test_an_inbox_takes_each_steer_once_and_hands_back_what_nobody_said_anything_of():
    box = SteerBox(turn_id=1)
    assert box.put(Steer(5, "a")) and box.put(Steer(5, "a again")) and box.put(Steer(6, "b"))
    assert box.take() == [Steer(5, "a"), Steer(6, "b")] and box.take() == []
    assert box.resolve(5) and not box.resolve(5)  # said twice: believed once
    assert not box.resolve(99)  # not one of this turn's
    assert box.text_of(6) == "b"
    assert box.close() == [6]  # taken, never reported: it runs as its own turn
    assert not box.put(Steer(7, "late"))  # the turn is over


def test_the_board_delivers_only_into_a_turn_running_here():
    board = SteerBoard()
    assert not board.deliver(1, Steer(2, "x"))
    with board.open(1, 10) as box:
        assert board.running_here(1) and board.deliver(1, Steer(12, "x"))
        assert box.take() == [Steer(12, "x")]
    assert not board.running_here(1) and not board.deliver(1, Steer(13, "y"))


def test_a_steer_never_goes_into_its_own_turn_or_a_later_one():
    """The running turn ended and the follow-up itself started between the tap and the
    delivery: the follow-up runs as itself, never fed its own words a second time."""
    board = SteerBoard()
    with board.open(1, 12) as box:
        assert not board.deliver(1, Steer(12, "x")) and not board.deliver(1, Steer(11, "y"))
        assert board.deliver(1, Steer(13, "z")) and box.take() == [Steer(13, "z")]


class Held:
    """An engine that takes no steer; each turn waits for its release."""

    def __init__(self, engine: str) -> None:
        self.engine = engine
        self.release = asyncio.Event()
        self.prompts: list[str] = []

    async def probe(self) -> Phrase:
        return Phrase("probe.version", {"engine": self.engine, "version": "held"})

    def sandbox_problem(self) -> None:
        return None

    async def run(self, spec, approver, steering=None, ready=None):  # type: ignore[no-untyped-def]
        if ready is not None:
            await ready()
        self.prompts.append(spec.prompt)
        async with asyncio.timeout(20):
            await self.release.wait()
        yield TurnFinished(False, f"{spec.prompt} done", SESSION, 0.0, Usage(1, 1))


async def until(check, timeout_s: float = 10) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.02)


async def follow(app, task_id: int, words: str, reply_to: int) -> Turn | None:  # type: ignore[no-untyped-def]
    """A reply to the task, as the chat's handler makes it: its turn (None: a repeat)."""
    asked = FollowUp(user_id=OWNER, task_id=task_id, prompt=words, reply_to=reply_to)
    done = await app.uses.follow_up.follow_up(asked)
    return done.turn if done is not None else None


def edits(app) -> list[str]:  # type: ignore[no-untyped-def]
    session: RecordingSession = app.bot.session
    return [c.text for c in session.calls if type(c).__name__ == "EditMessageText"]


async def test_a_steer_the_turn_never_takes_runs_once_as_the_next_turn(tmp_path, workdir):
    """Delivered into a turn whose engine takes no steer: when that turn ends the steer is said
    to run as the next turn, and does, once; a second tap finds it gone; nobody else's tap
    reaches it."""
    engine = Held("claude")
    async with app_in_own_task(
        _settings(tmp_path, workdir), session=RecordingSession(), executors={"claude": engine}
    ) as app:
        task = await app.uses.create.start(
            NewTask(OWNER, OWNER, "claude", TaskKind.SESSION, "first", workdir)
        )
        await until(lambda: _is(engine.prompts, ["first"]))
        turn = await follow(app, task.id, "steer words", 90001)
        assert turn is not None and app.uses.steering is not None
        with pytest.raises(TaskNotFound):
            await app.uses.steering.choose(STRANGER, turn.id, SteerChoice.STEER)
        answer = await app.uses.steering.choose(OWNER, turn.id, SteerChoice.STEER)
        assert answer is SteerAnswer.SENT
        engine.release.set()
        await until(lambda: _done(app, task.id))
        assert engine.prompts == ["first", "steer words"]
        assert await app.uses.steering.choose(OWNER, turn.id, SteerChoice.STEER) == "gone"
        assert await app.outbox.idle(10)
        assert any("the turn ended first: it runs as the next turn" in t for t in edits(app))


async def test_a_steer_tapped_after_its_turn_ended_is_the_next_turn(tmp_path, workdir):
    """The running turn has ended (its agent gone) but the follow-up has not started (the only
    slot went to an older task): Steer answers that it runs next, and it runs once."""
    first, other = Held("claude"), Held("codex")
    settings = _settings(tmp_path, workdir).model_copy(update={"max_concurrent_turns": 1})
    async with app_in_own_task(
        settings, session=RecordingSession(), executors={"claude": first, "codex": other}
    ) as app:
        a = await app.uses.create.start(
            NewTask(OWNER, OWNER, "claude", TaskKind.SESSION, "a", workdir)
        )
        await until(lambda: _is(first.prompts, ["a"]))
        await app.uses.create.start(NewTask(OWNER, OWNER, "codex", TaskKind.SESSION, "b", workdir))
        turn = await follow(app, a.id, "late words", 90002)
        assert turn is not None and app.uses.steering is not None
        first.release.set()
        await until(lambda: _is(other.prompts, ["b"]))  # the slot went to the older task
        answer = await app.uses.steering.choose(OWNER, turn.id, SteerChoice.STEER)
        assert answer is SteerAnswer.NEXT
        other.release.set()
        await until(lambda: _done(app, a.id))
        assert first.prompts == ["a", "late words"]
        assert (await app.store.tasks.get_turn(turn.id)).status is TaskStatus.DONE


async def _is(value: list[str], wanted: list[str]) -> bool:
    return value == wanted


async def _done(app, task_id: int) -> bool:  # type: ignore[no-untyped-def]
    task = await app.store.tasks.get(task_id)
    return task.status is TaskStatus.DONE and len(await app.store.tasks.turns_of(task_id)) >= 2


async def test_a_turn_running_in_another_process_is_not_steered_from_here(tmp_path, workdir):
    """Scale-out: the bot's desk sees the task running but no inbox of its own (the turn runs on
    a worker): the tap says so and the follow-up stays queued, to run after that turn."""
    from bot.tasks.steering import SteerDesk

    engine = Held("claude")
    async with app_in_own_task(
        _settings(tmp_path, workdir), session=RecordingSession(), executors={"claude": engine}
    ) as app:
        task = await app.uses.create.start(
            NewTask(OWNER, OWNER, "claude", TaskKind.SESSION, "first", workdir)
        )
        await until(lambda: _is(engine.prompts, ["first"]))
        turn = await follow(app, task.id, "words", 90003)
        assert turn is not None
        front = SteerDesk(
            app.store, SteerBoard(), app.core.notifier, default="queue", choice_s=10, local=False
        )
        assert await front.choose(OWNER, turn.id, SteerChoice.STEER) is SteerAnswer.ELSEWHERE
        assert (await app.store.tasks.get_turn(turn.id)).status is TaskStatus.QUEUED
        engine.release.set()
        await until(lambda: _done(app, task.id))
        assert engine.prompts == ["first", "words"]
        await front.aclose()


async def test_untapped_the_default_queue_keeps_it_behind_and_drops_the_choice(tmp_path, workdir):
    """DETACH_REPLY_DEFAULT=queue (the default): after the choice's wait the acknowledgement
    loses Steer now / Queue and says it is queued; the follow-up runs after the turn."""
    engine = Held("claude")
    settings = _settings(tmp_path, workdir).model_copy(update={"reply_choice_s": 0.3})
    async with app_in_own_task(
        settings, session=RecordingSession(), executors={"claude": engine}
    ) as app:
        task = await app.uses.create.start(
            NewTask(OWNER, OWNER, "claude", TaskKind.SESSION, "first", workdir)
        )
        await until(lambda: _is(engine.prompts, ["first"]))
        turn = await follow(app, task.id, "later", 90004)
        assert turn is not None and app.uses.steering is not None
        with pytest.raises(TaskNotFound):  # somebody else's tap leaves the owner's default
            await app.uses.steering.choose(STRANGER, turn.id, SteerChoice.STEER)

        async def said_queued() -> bool:
            await app.outbox.idle(1)
            return any("follow-up queued (after the running turn)" in t for t in edits(app))

        await until(said_queued)
        assert (await app.store.tasks.get_turn(turn.id)).status is TaskStatus.QUEUED
        engine.release.set()
        await until(lambda: _done(app, task.id))
        assert engine.prompts == ["first", "later"]


class _SilentRpc:
    """An app-server that never answers ``turn/steer`` within the bound."""

    async def request(self, method: str, params: dict, timeout_s: float) -> dict:
        await asyncio.sleep(timeout_s)
        raise TimeoutError(method)


def _user_message(text: str) -> dict:
    item = {"type": "userMessage", "content": [{"type": "text", "text": text}]}
    return {"method": "item/started", "params": {"item": item}}


async def test_an_unanswered_codex_steer_is_in_when_the_turn_shows_it_else_next():
    """No answer to ``turn/steer`` within its bound is not a refusal: the app-server may have
    taken it. The turn showing its words makes it taken in (never run again); a turn that
    completes without showing it leaves it to run as the next turn."""
    from bot.events import SteerDeferred, SteerTaken
    from executors.codex_steer import CodexSteering

    box = SteerBox(1)
    steering = CodexSteering(box, _SilentRpc(), "thread", "turn", timeout_s=0.05)  # type: ignore[arg-type]
    box.put(Steer(2, "shown later"))
    box.put(Steer(3, "never shown"))
    async with asyncio.timeout(5):
        while len(steering._unsure) < 2:  # both sent, neither answered
            await asyncio.sleep(0.01)
    assert steering.said() == []  # not deferred on the timeout alone
    steering.shown(_user_message("shown later"))
    assert steering.said() == [SteerTaken(2)]
    assert await steering.finished() == [SteerDeferred(3)]


class _SlowRpc:
    """An app-server that takes the steer at once (its item shows) but answers only after the
    bound."""

    def __init__(self) -> None:
        self.asked = asyncio.Event()

    async def request(self, method: str, params: dict, timeout_s: float) -> dict:
        self.asked.set()
        await asyncio.sleep(timeout_s)
        raise TimeoutError(method)


async def test_a_codex_steer_shown_while_its_request_waits_is_in_once():
    """The turn shows the steer's words before ``turn/steer`` answers (then it times out): it is
    taken in, never run again as the next turn."""
    from bot.events import SteerTaken
    from executors.codex_steer import CodexSteering

    box, rpc = SteerBox(1), _SlowRpc()
    steering = CodexSteering(box, rpc, "thread", "turn", timeout_s=0.2)  # type: ignore[arg-type]
    box.put(Steer(2, "shown early"))
    async with asyncio.timeout(5):
        await rpc.asked.wait()
    steering.shown(_user_message("shown early"))
    async with asyncio.timeout(5):
        while not (said := steering.said()):
            await asyncio.sleep(0.01)
    assert said == [SteerTaken(2)]
    assert await steering.finished() == []
