"""The Bot API session keeps the response models aiogram builds per call (pydantic caches them
only weakly: a collected one is rebuilt, milliseconds of schema building on every send)."""

from __future__ import annotations

import gc
import json
import ssl
import weakref

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
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


async def test_the_session_verifies_tls_with_the_contexts_aiohttp_already_built():
    """No TLS context of its own (aiogram's certifi one: 1.2 MB, ~20 ms), verification on, and
    the same state as aiogram's own session (an aiogram upgrade that adds some fails here)."""
    ours, theirs = BotApiSession(), AiohttpSession()
    try:
        assert set(vars(ours)) == set(vars(theirs))
        assert ours._connector_init["ssl"] is True  # aiohttp's verified default context
        assert theirs._connector_init["ssl"].verify_mode is ssl.CERT_REQUIRED
        connector = ours._connector_type(**ours._connector_init)
        try:
            context = connector._get_ssl_context(_HttpsRequest())
            assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
            assert context.cert_store_stats()["x509_ca"] > 0  # the system's trust store
        finally:
            await connector.close()
    finally:
        await ours.close()
        await theirs.close()


class _HttpsRequest:
    """What TCPConnector asks of a request to pick its TLS context."""

    is_ssl = staticmethod(lambda: True)
    ssl = True
