"""The stall watchdog's message in the store (``bot.store.stalls``), on SQLite and PostgreSQL:
of a Keep waiting and the turn's end (or two taps) exactly one wins, and a tap while the
watchdog sends its next message waits for it and silences that one."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from bot.store import Store
from bot.store.stalls import StallNotice, StallNoticeState
from tests.support.postgres import STORE_KINDS, opened_store
from tests.test_store import Clock, new


@pytest.fixture(params=STORE_KINDS)
async def store(request, tmp_path):  # type: ignore[no-untyped-def]
    async with opened_store(request.param, tmp_path, Clock()) as opened:
        yield opened


async def a_turn(store: Store) -> int:
    _, turn = await store.tasks.create(new(), "t")
    return turn.id


async def test_keep_waiting_wins_once_and_the_end_finds_it_answered(store):
    turn_id = await a_turn(store)
    assert await store.stalls.silence(turn_id) is None  # the watchdog never spoke
    await store.stalls.spoke(StallNotice(turn_id, 1, 10, "quiet"))
    await store.stalls.spoke(StallNotice(turn_id, 1, 11, "quieter"))  # a new state's message
    silenced = await store.stalls.silence(turn_id)
    assert silenced == StallNotice(turn_id, 1, 11, "quieter", StallNoticeState.WAITING)
    assert await store.stalls.silence(turn_id) is None  # a second tap
    assert (await store.stalls.end(turn_id, 11)) == silenced  # the end: nothing left to close
    assert await store.stalls.get(turn_id) is None
    assert await store.stalls.silence(turn_id) is None  # a tap after the end


async def test_the_end_closes_an_open_message_and_a_later_tap_finds_nothing(store):
    turn_id = await a_turn(store)
    await store.stalls.spoke(StallNotice(turn_id, 1, 10, "quiet"))
    ended = await store.stalls.end(turn_id, 10)
    assert ended is not None and ended.state is StallNoticeState.OPEN
    assert await store.stalls.silence(turn_id) is None
    assert await store.stalls.end(turn_id, 10) is None


async def test_a_tap_while_the_next_message_is_sent_silences_that_one(store):
    turn_id = await a_turn(store)
    await store.stalls.spoke(StallNotice(turn_id, 1, 10, "quiet"))
    async with store.atomic():
        before = await store.stalls.get(turn_id, lock=True)
        assert before is not None and before.state is StallNoticeState.OPEN
        # the tap is another process's: none of this transaction's context
        tap = asyncio.create_task(store.stalls.silence(turn_id), context=contextvars.Context())
        await asyncio.sleep(0.3)  # bounded: the tap waits for the row (or the writer)
        assert not tap.done()
        await store.stalls.spoke(StallNotice(turn_id, 1, 11, "quieter"))
    silenced = await asyncio.wait_for(tap, 10)
    assert silenced == StallNotice(turn_id, 1, 11, "quieter", StallNoticeState.WAITING)


async def test_the_end_of_a_run_that_lost_the_turn_leaves_the_new_runners_message(store):
    """A process lost the turn (its lease) after its watchdog spoke; the new runner's watchdog
    spoke since, and its owner chose Keep waiting there. The old run's end takes away nothing
    (main deleted the turn's message, whichever run sent it, and with it the Keep waiting);
    the new run's end takes its own."""
    turn_id = await a_turn(store)
    await store.stalls.spoke(StallNotice(turn_id, 1, 10, "quiet"))  # the old run
    await store.stalls.spoke(StallNotice(turn_id, 1, 20, "quiet here"))  # the new run
    assert await store.stalls.end(turn_id, 10) is None
    newer = StallNotice(turn_id, 1, 20, "quiet here", StallNoticeState.WAITING)
    assert await store.stalls.silence(turn_id) == newer
    assert await store.stalls.end(turn_id, 10) is None
    assert await store.stalls.get(turn_id) == newer  # a watchdog there still reads the answer
    assert await store.stalls.end(turn_id, 20) == newer
    assert await store.stalls.get(turn_id) is None


async def test_the_end_of_dead_turns_takes_their_messages_whichever_run_sent_them(store):
    """A crash or a takeover ends the turns' runs: their messages (open or silenced) are
    returned to close and forgotten; another turn's stays. None: every turn's."""
    dead, alive = await a_turn(store), await a_turn(store)
    await store.stalls.spoke(StallNotice(dead, 1, 10, "quiet"))
    await store.stalls.spoke(StallNotice(alive, 1, 20, "quiet too"))
    assert await store.stalls.end_turns([dead]) == [StallNotice(dead, 1, 10, "quiet")]
    assert await store.stalls.get(dead) is None
    assert await store.stalls.end_turns([dead]) == []
    await store.stalls.silence(alive)
    (ended,) = await store.stalls.end_turns()
    assert ended.turn_id == alive and ended.state is StallNoticeState.WAITING
