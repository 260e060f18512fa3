"""The board draws the hosts (issue #57), in Debian's chromium through Playwright: the bot on
the machine's PostgreSQL is one host, a second announces itself through its heartbeat; the
list page shows each with its state, engines, slots in use, usage windows and projects, names
the host that ran each task, and shows a host going offline within one heartbeat."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest

from bot.models import TaskStatus
from bot.store import EnginePresence, Presence, UsageWindow
from bot.store.db import utcnow
from tests.support.fake_engine import FakeEngine
from tests.support.postgres import postgres_database
from tests.test_board import bot_with_board, client, finished, wait_status
from tests.test_board_browser import browser, open_signed_in, shoot  # noqa: F401
from tests.test_handlers import feed, message

pytestmark = pytest.mark.slow

LEASE_S = 3.0  # a heartbeat every half second
BEAT_S = LEASE_S / 6


def beta_presence() -> Presence:
    window = UsageWindow("claude", "five_hour", 0.4, utcnow() + timedelta(hours=2), utcnow())
    return Presence(
        (EnginePresence("claude", True, "claude 2.1.0", True),),
        slots=3,
        free=3,
        projects=(("web", "/srv/beta/web"),),
        windows=(window,),
    )


async def test_the_board_draws_the_hosts_and_who_ran_each_task(tmp_path, workdir, browser):  # noqa: F811
    async with postgres_database() as url:
        settings = dict(database_url=url, worker_lease_s=LEASE_S, host_name="front-box")
        engine = FakeEngine(finished("All green."))
        async with bot_with_board(tmp_path, workdir, engine, **settings) as (app, board):
            await app.store.runners.register("w1@beta#1", "w1", "beta", "worker", LEASE_S)

            async def heartbeat() -> None:  # beta's, as its worker would beat
                while await app.store.runners.beat(
                    "w1@beta#1", ["claude"], LEASE_S, beta_presence()
                ):
                    await asyncio.sleep(BEAT_S)

            beating = asyncio.create_task(heartbeat())
            await feed(app, message("/claude finish quickly"))
            await wait_status(app, 1, TaskStatus.DONE)

            async with client() as http, http.get(f"{board.url}/api/hosts") as response:
                assert response.status == 401  # signed-in users only, as all of the board
            page = await open_signed_in(browser, board)
            await page.wait_for_selector('.task[data-id="1"] .badge.done')
            assert "📍 front-box" in await page.inner_text('.task[data-id="1"]')
            beta = await page.wait_for_selector('.host.online[data-host="beta"]', timeout=5_000)
            text = await beta.inner_text()
            assert "0/3 slots in use" in text and "runners: w1" in text
            assert "claude 2.1.0" in text and "claude five-hour 40 %" in text
            assert "web /srv/beta/web" in text
            front = await page.wait_for_selector('.host.online[data-host="front-box"]')
            assert "claude" in await front.inner_text()
            await shoot(page, "hosts")

            beating.cancel()
            await app.store.runners.stop("w1@beta#1")  # a clean stop: offline at once
            stopped = time.monotonic()
            await page.wait_for_selector('.host.offline[data-host="beta"]', timeout=5_000)
            shown_s = time.monotonic() - stopped
            assert shown_s <= BEAT_S + 0.5, f"offline shown after {shown_s:.2f} s"
            assert "offline" in await page.inner_text('.host[data-host="beta"]')

            await page.goto(board.url + "/tasks/1")
            await page.wait_for_selector("#head .badge.done")
            assert "📍 front-box" in await page.inner_text("#head")
        print(f"a stopped host shown offline on the board after {shown_s:.2f} s")
