"""The lists with 1,000 tasks: `/tasks`, the board's list and `/archive all`, each from the
update (or the request) to the answer, through the real bot (long polling against the fake Bot
API, SQLite) and its board over HTTP. The 1,000 finished tasks are seeded in the store, each with
its card delivered first, as a chat that has used the bot for months has them. Target of each:
under 300 ms."""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import Figure, record  # noqa: E402
from bot import lazy_types  # noqa: E402
from tests.support.fake_engine import FakeEngine  # noqa: E402
from tests.support.fake_telegram import FakeTelegram  # noqa: E402
from tests.support.harness import OWNER, make_settings, running_bot  # noqa: E402
from tests.test_archive_all import seed  # noqa: E402

TASKS = 1000
RUNS = 7
TARGET_MS = 300.0


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        engine = FakeEngine(())
        async with FakeTelegram(flood_burst=10_000, flood_per_s=10_000) as fake:
            settings = make_settings(
                Path(tmp) / "data", fake, "claude", workdir, outbox_chat_interval_s=0, board_port=0
            )
            began = time.monotonic()
            await seed(settings.resolved_database_url, workdir, TASKS)
            async with running_bot(settings, {}, {"claude": engine}) as app:
                assert await app.outbox.idle(300), "the cards were not delivered"
                await lazy_types.warm()  # as `detach run` does once polling started
                print(
                    f"{TASKS} finished tasks seeded with their cards in "
                    f"{time.monotonic() - began:.0f} s"
                )
                listing = []
                for _ in range(RUNS):
                    mark, start = len(fake.calls), time.monotonic()
                    await fake.user_message("/tasks", OWNER)
                    answer = await fake.wait_call("sendMessage", timeout_s=30, after=mark)
                    listing.append(1000 * (answer.at - start))
                board = app.dispatcher["board"]
                jar = aiohttp.CookieJar(unsafe=True)
                on_board = []
                async with aiohttp.ClientSession(cookie_jar=jar) as http:
                    async with http.get(board.link(OWNER), allow_redirects=False):
                        pass
                    for _ in range(RUNS):
                        start = time.monotonic()
                        async with http.get(f"{board.url}/api/tasks") as response:
                            rows = (await response.json())["tasks"]
                        on_board.append(1000 * (time.monotonic() - start))
                mark, start = len(fake.calls), time.monotonic()
                await fake.user_message("/archive all", OWNER)
                answer = await fake.wait_text(OWNER, f"{TASKS}", 30, after=mark)
                archived = 1000 * (answer.at - start)
    for name, took in (
        (f"/tasks with {TASKS} tasks (median of {RUNS})", statistics.median(listing)),
        (
            f"the board's list with {TASKS} tasks (median of {RUNS}, {len(rows)} rows)",
            statistics.median(on_board),
        ),
        (f"/archive all of {TASKS} tasks, to its answer", archived),
    ):
        print(f"{name}: {took:.0f} ms (target < {TARGET_MS:.0f} ms)")
        record(Figure(name, took, "ms", TARGET_MS))


if __name__ == "__main__":
    asyncio.run(main())
