"""The board's two promises, measured in-process against the real bot (fake Bot API session, a
replayed engine), on SQLite as deployed by default:

1. a task with 2,000 transcript lines loads in under 300 ms: the page's own requests (the task,
   then the transcript, up to 5,000 lines a request, as the page asks) over HTTP, median of
   ``RUNS``; and, when Debian's chromium is here, the page in a headless browser at phone width
   until the 2,000th line is drawn (the page's own mark, from the navigation's start);
2. 50 open pages do not slow the bot's turns: one-step turns one after another (start to
   done), ``TURNS`` with no page open then ``TURNS`` with 50 event streams open (25 task pages,
   25 lists), ``ROUNDS`` times interleaved.

Run: .venv/bin/python bench/board.py
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.models import NewTask, TaskKind, TaskStatus  # noqa: E402
from bot.settings import Settings  # noqa: E402
from tests.support.fake_engine import FakeEngine  # noqa: E402
from tests.support.fake_telegram import TOKEN  # noqa: E402
from tests.support.harness import OWNER, app_in_own_task  # noqa: E402
from tests.support.recording_session import RecordingSession  # noqa: E402
from tests.test_board import finished  # noqa: E402

LINES = 2000
RUNS = 20
TURNS = 10  # per round
ROUNDS = 4
PAGES = 50


async def load_once(http: aiohttp.ClientSession, base: str, task_id: int) -> tuple[float, int]:
    began = time.perf_counter()
    async with http.get(f"{base}/api/tasks/{task_id}") as response:
        await response.json()
    cursor, items = 0, 0
    while True:
        query = f"transcript?limit=5000&cursor={cursor}"
        async with http.get(f"{base}/api/tasks/{task_id}/{query}") as response:
            page = await response.json()
        items += len(page["items"])
        cursor = page["cursor"]
        if not page["more"]:
            break
    return time.perf_counter() - began, items


async def turns(app, workdir: Path) -> list[float]:  # type: ignore[no-untyped-def]
    took = []
    for n in range(TURNS):
        began = time.perf_counter()
        task = await app.uses.create.start(
            NewTask(OWNER, OWNER, "claude", TaskKind.SESSION, f"turn {n}", workdir)
        )
        while (await app.store.tasks.get(task.id)).status is not TaskStatus.DONE:
            await asyncio.sleep(0.002)
        took.append(time.perf_counter() - began)
    return took


async def hold_stream(http: aiohttp.ClientSession, url: str, stop: asyncio.Event) -> int:
    events = 0
    async with http.get(url) as response:
        while not stop.is_set():
            try:
                line = await asyncio.wait_for(response.content.readline(), 0.5)
            except TimeoutError:
                continue
            events += line.startswith(b"event:")
    return events


async def browser_load(base: str, link: str, task_id: int) -> float | None:
    chromium = shutil.which("chromium")
    if chromium is None:
        return None
    from playwright.async_api import async_playwright

    from tests.test_board_browser import FLAGS, PHONE

    with tempfile.TemporaryDirectory() as profile:
        async with async_playwright() as pw:
            context = await pw.chromium.launch_persistent_context(
                profile, executable_path=chromium, headless=True, args=FLAGS, viewport=PHONE
            )
            page = await context.new_page()
            await page.goto(link)
            await page.wait_for_selector("#tasks")
            took = []
            for _ in range(9):  # from the navigation's start to the lines drawn, in the page
                await page.goto(f"{base}/tasks/{task_id}")
                # a selector, not a predicate: the board's CSP refuses eval, which those use
                await page.wait_for_selector(f"#transcript > .item:nth-child({LINES * 2 // 3})")
                drawn = await page.evaluate(
                    "performance.getEntriesByName('transcript-drawn')[0].startTime"
                )
                took.append(drawn / 1000)
            await context.close()
    return statistics.median(took)


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        settings = Settings(
            _env_file=None,
            bot_token=TOKEN,
            allowed_users=frozenset({OWNER}),
            data_dir=Path(tmp) / "data",
            workdir=workdir,
            outbox_chat_interval_s=0,
            board_port=0,
            max_concurrent_turns=2,
        )  # type: ignore[call-arg]
        engine = FakeEngine(finished("ok"))
        async with app_in_own_task(
            settings, session=RecordingSession(), executors={"claude": engine}
        ) as app:
            board = app.dispatcher["board"]
            seeded = await app.uses.create.start(
                NewTask(OWNER, OWNER, "claude", TaskKind.SESSION, "a long one", workdir)
            )
            while (await app.store.tasks.get(seeded.id)).status is not TaskStatus.DONE:
                await asyncio.sleep(0.01)
            turn = await app.store.tasks.last_turn(seeded.id)
            kinds = [
                ("TextEmitted", {"text": "thinking about line %d " * 4}),
                ("ToolCalled", {"tool_use_id": "t", "name": "Bash", "summary": "make test"}),
                ("ToolFinished", {"tool_use_id": "t", "is_error": False, "output": "ok\n" * 5}),
            ]
            rows = [kinds[n % 3] for n in range(LINES)]
            await app.store.transcript.append(seeded.id, turn.id, rows)
            jar = aiohttp.CookieJar(unsafe=True)
            async with aiohttp.ClientSession(cookie_jar=jar) as http:
                async with http.get(board.link(OWNER), allow_redirects=False):
                    pass
                loads = [await load_once(http, board.url, seeded.id) for _ in range(RUNS)]
                print(
                    f"load a task of {LINES} transcript lines over HTTP: median "
                    f"{statistics.median(t for t, _ in loads) * 1000:.0f} ms, max "
                    f"{max(t for t, _ in loads) * 1000:.0f} ms ({loads[0][1]} items)"
                )
                urls = [f"{board.url}/api/tasks/{seeded.id}/stream"] * (PAGES // 2) + [
                    f"{board.url}/api/stream"
                ] * (PAGES - PAGES // 2)
                in_browser = await browser_load(board.url, board.link(OWNER), seeded.id)
                if in_browser is not None:
                    print(
                        f"load it in headless chromium to the lines drawn: median "
                        f"{in_browser * 1000:.0f} ms"
                    )
                quiet: list[float] = []
                busy: list[float] = []
                for _round in range(ROUNDS):  # interleaved: the machine's load hits both alike
                    quiet += await turns(app, workdir)
                    stop = asyncio.Event()
                    holders = [asyncio.create_task(hold_stream(http, u, stop)) for u in urls]
                    await asyncio.sleep(0.5)
                    busy += await turns(app, workdir)
                    stop.set()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(asyncio.gather(*holders), 10)
                calm, loaded = statistics.median(quiet), statistics.median(busy)
                print(
                    f"{TURNS * ROUNDS} turns, start to done: median {calm * 1000:.1f} ms with no "
                    f"page open, {loaded * 1000:.1f} ms with {PAGES} open ({loaded / calm:.2f}x)"
                )


if __name__ == "__main__":
    asyncio.run(main())
