"""Streams bounded by pieces and time as well as characters: an endpoint that streams a 1 MB
tool argument in 1-character pieces, or trickles its answer, ends the turn with a clear
``StreamBounded`` while the whole bot answers another chat's /tasks in under a second; an agent
CLI's flood of short lines hands the loop back between lines, and a long line costs linear
time."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import pytest

from bot.errors import Bound, StreamBounded
from executors.local_chat import Answer, Endpoint, complete
from executors.local_pieces import Bounds
from executors.process import read_lines
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_hostile_files import MACHINE, OTHER, answered_in

MEGABYTE_ARGUMENT = json.dumps({"path": "big.txt", "content": "x" * 1_000_000})


@pytest.fixture
def chat() -> object:
    mock = ChatMock().start()
    yield mock
    mock.stop()


async def _complete(chat: ChatMock, marker: str, bounds: Bounds) -> Answer:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=chat.base_url, api_key="k", max_retries=0)
    endpoint = Endpoint(chat.base_url, "m", None, 32_768)
    answer = Answer()
    try:
        messages = [{"role": "user", "content": marker}]
        async for _ in complete(client, endpoint, messages, 4096, 1, answer, bounds):
            pass
    finally:
        await client.close()
    return answer


async def test_a_megabyte_argument_in_one_character_pieces_stops_at_the_piece_bound(chat):
    chat.script(
        "MARK-PIECES",
        [{"tools": [{"name": "write_file", "raw_args": MEGABYTE_ARGUMENT, "piece": 1}]}],
    )
    started = time.monotonic()
    with pytest.raises(StreamBounded) as bounded:
        await _complete(chat, "MARK-PIECES", Bounds.of(4096, 60))
    # well before the answer's 60 s: the pieces stopped it (~1 s; 13.8 s once, a VM at load 8)
    assert time.monotonic() - started < 45
    error = bounded.value
    assert error.bound is Bound.PIECES and error.limit == 4096 + 128
    assert error.part == "the arguments of write_file" and chat.base_url in error.source
    assert "streamed the arguments of write_file in more than 4224 pieces" in error.reason


async def test_an_answer_of_too_many_pieces_in_all_stops_too(chat):
    text = "y" * 600  # 30 pieces of 20 characters, beside 30 more of a call's arguments
    tools = [{"name": "list_files", "raw_args": " " * 40 + "{}", "piece": 1}]
    chat.script("MARK-ALL", [{"text": text, "tools": tools}])
    with pytest.raises(StreamBounded) as bounded:
        await _complete(chat, "MARK-ALL", Bounds(pieces=50, part_pieces=40, seconds=60))
    assert bounded.value.part == "one answer" and bounded.value.limit == 50


async def test_a_trickling_answer_stops_at_the_time_bound(chat):
    chat.script("MARK-SLOW", [{"text": "z" * 400, "pace": 0.25}])  # 20 pieces, 5 s
    started = time.monotonic()
    with pytest.raises(StreamBounded) as bounded:
        await _complete(chat, "MARK-SLOW", Bounds(pieces=1000, part_pieces=1000, seconds=0.5))
    assert time.monotonic() - started < 3.0  # not the whole answer's 5 s, on a loaded machine
    assert bounded.value.bound is Bound.SECONDS and bounded.value.limit == 0.5
    assert "for more than 0.5 s" in bounded.value.reason


async def test_an_honest_answer_within_the_bounds_is_read_whole(chat):
    chat.script("MARK-OK", [{"text": "fine " * 200}])
    answer = await _complete(chat, "MARK-OK", Bounds.of(4096, 60))
    assert answer.got().text == "fine " * 200


async def test_the_bot_answers_another_chat_while_an_endpoint_streams_pieces(
    tmp_path, workdir, chat
):
    """16,000 one-character pieces of a tool argument (what DETACH_LOCAL_MAX_TOKENS=16384
    allows, ~4 s of the SDK's parsing): another chat's /tasks answers in under a second each
    time it asks meanwhile; the turn then ends with the bound named."""
    chat.script(
        "MARK-FLOOD",
        [{"tools": [{"name": "write_file", "raw_args": MEGABYTE_ARGUMENT, "piece": 1}]}],
    )
    chat.script("MARK-WARM", [{"text": "READY-TO-GO"}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            "claude",
            workdir,
            allowed_users=frozenset({OWNER, OTHER}),
            local_base_url=chat.base_url,
            local_max_tokens=16_384,
        )
        async with running_bot(settings, MACHINE):
            await fake.wait_call("setMyCommands")
            await answered_in(fake, OTHER)  # the first answer of a new bot (imports)
            await fake.user_message("/detach engine=local MARK-WARM say hi", OWNER)
            await fake.wait_text(OWNER, "READY-TO-GO", timeout_s=30)  # the first /local: the SDK
            seconds = await _asked_while_streaming(fake, chat)
            card = await fake.wait_text(OWNER, "pieces; the turn stopped", timeout_s=60)
    assert max(seconds) < 1.0, seconds  # 8.8 s measured without the yields
    assert "the arguments of write_file in more than 16512 pieces" in card.params["text"]
    assert not (workdir / "big.txt").exists()


async def _asked_while_streaming(fake: FakeTelegram, chat: ChatMock) -> list[float]:
    """The flood started, how long /tasks of the other chat takes, three times."""
    await fake.user_message("/detach engine=local MARK-FLOOD write it", OWNER)
    async with asyncio.timeout(20):
        while not chat.requests_for("MARK-FLOOD"):
            await asyncio.sleep(0.02)
    return [await answered_in(fake, OTHER) for _ in range(3)]


# -- agent CLIs' lines --------------------------------------------------------------------------


async def _lines_of(code: str) -> tuple[int, float]:
    """How many lines a child printing with ``code`` wrote, and the CPU seconds reading took."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, limit=64 * 2**20
    )
    assert proc.stdout is not None
    started = time.process_time()
    count = sum([1 async for _ in read_lines(proc.stdout, proc)])
    spent = time.process_time() - started
    await proc.wait()
    return count, spent


async def test_a_flood_of_short_lines_hands_the_loop_back():
    """20,000 short lines already waiting in the pipe's buffer: the loop runs others' work
    between any two of them (a reader that took them all at once would not)."""
    stream = asyncio.StreamReader(limit=2**20)
    stream.feed_data(b"".join(b'{"n": %d}\n' % n for n in range(20_000)))
    stream.feed_eof()
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            await asyncio.sleep(0)
            turns += 1

    ticker = asyncio.create_task(other())
    try:
        count = sum([1 async for _ in read_lines(stream)])
    finally:
        ticker.cancel()
    assert count == 20_000
    assert turns >= count - 1, turns


async def test_a_long_line_costs_linear_time():
    """asyncio's reader searches only what arrived since it last looked: 4 times the line,
    about 4 times the work (quadratic would be 16)."""
    line = "import sys\nsys.stdout.write('x' * {size} + '\\n')"
    _, small = await _lines_of(line.format(size=6 * 2**20))
    _, large = await _lines_of(line.format(size=24 * 2**20))
    assert large < 9 * small + 0.05, (small, large)
