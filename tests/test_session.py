"""The Bot API session keeps the response models aiogram builds per call (pydantic caches them
only weakly: a collected one is rebuilt, milliseconds of schema building on every send)."""

from __future__ import annotations

import gc
import json
import weakref

from aiogram import Bot
from aiogram.methods import Response, SendMessage
from aiogram.types import Message

from bot.telegram.session import BotApiSession
from tests.support.fake_telegram import TOKEN

REPLY = {"ok": True, "result": {"message_id": 7, "date": 0, "chat": {"id": 1, "type": "private"}}}


async def test_a_response_model_is_built_once_per_process():
    session = BotApiSession()
    bot = Bot(TOKEN, session=session)
    try:
        answer = session.check_response(
            bot, SendMessage(chat_id=1, text="x"), 200, json.dumps(REPLY)
        )
        assert answer.result.message_id == 7
        kept = weakref.ref(Response[Message])
        del answer  # an instance holds its class: without it only the session may
        gc.collect()
        assert kept() is not None  # still cached: the next send does not rebuild it
    finally:
        await session.close()
