"""The messages of one chat are handled in the order they arrived, however long the handler of
an earlier one takes (bounded by ``CHAT_ORDER_S``); other chats and button taps never wait
(``bot.telegram.journal``). Through the real dispatcher, long polling the fake Bot API."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from aiogram import Bot, F, Router
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.types import CallbackQuery, Message

from bot.store import Store
from bot.telegram.journal import CHAT_ORDER_S, JournaledDispatcher
from tests.support.fake_telegram import TOKEN, FakeTelegram

SLOW_S = 0.5  # the first message's handler: slower than everything after it put together


@contextlib.asynccontextmanager
async def polling(
    tmp_path: Path, fake: FakeTelegram, router: Router, chat_order_s: float = CHAT_ORDER_S
) -> AsyncIterator[None]:
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path}/detach.sqlite")
    bot = Bot(TOKEN, session=AiohttpSession(api=TelegramAPIServer.from_base(fake.base_url)))
    dispatcher = JournaledDispatcher(store, asyncio.Event(), chat_order_s=chat_order_s)
    dispatcher.include_router(router)
    task = asyncio.create_task(
        dispatcher.start_polling(bot, handle_signals=False, polling_timeout=1)
    )
    try:
        yield
    finally:
        await dispatcher.stop_polling()
        await asyncio.wait_for(task, 10)
        await bot.session.close()
        await store.close()


def recording_router(handled: list[str], done: asyncio.Event, last: str) -> Router:
    router = Router()

    @router.message(F.text)
    async def on_text(message: Message) -> None:
        if message.text == "slow":
            await asyncio.sleep(SLOW_S)
        handled.append(str(message.text))
        if message.text == last:
            done.set()

    @router.callback_query()
    async def on_tap(query: CallbackQuery) -> None:
        handled.append(f"tap:{query.data}")

    return router


async def test_a_chats_messages_are_handled_in_order_and_nothing_else_waits(tmp_path):
    handled: list[str] = []
    done = asyncio.Event()
    async with (
        FakeTelegram() as fake,
        polling(tmp_path, fake, recording_router(handled, done, "second")),
    ):
        first = await fake.user_message("slow", user_id=7)
        await fake.user_message("second", user_id=7)
        await fake.user_message("elsewhere", user_id=8)
        await fake.press(7, first["message_id"], "x", user_id=7)
        await asyncio.wait_for(done.wait(), 10)
    # the tap and the other chat went by the slow handler; this chat's second message did not
    assert handled.index("slow") < handled.index("second")
    assert handled.index("elsewhere") < handled.index("slow")
    assert handled.index("tap:x") < handled.index("slow")


async def test_a_stuck_handler_holds_its_chat_only_for_the_bound(tmp_path):
    handled: list[str] = []
    done = asyncio.Event()
    async with (
        FakeTelegram() as fake,
        polling(tmp_path, fake, recording_router(handled, done, "second"), chat_order_s=0.1),
    ):
        await fake.user_message("slow", user_id=7)
        await fake.user_message("second", user_id=7)
        await asyncio.wait_for(done.wait(), 10)
        assert handled == ["second"]  # it went on after 0.1 s, not after the slow one's 0.5 s
