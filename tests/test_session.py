"""The Bot API session: answers read through the Telegram types' own validators (the same
results and errors as aiogram's own reading, without a ``Response[T]`` copy of the types per
return type); other return types as aiogram reads them, their models kept (pydantic caches them
only weakly: a collected one is rebuilt, milliseconds of schema building on every call); TLS
with the context aiohttp built."""

from __future__ import annotations

import gc
import json
import ssl
import weakref
from typing import Any

import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.exceptions import ClientDecodeError
from aiogram.methods import (
    AnswerCallbackQuery,
    EditMessageText,
    ExportChatInviteLink,
    GetChatMember,
    GetChatMemberCount,
    GetMe,
    GetMyCommands,
    GetUpdates,
    Response,
    SendMessage,
    TelegramMethod,
)
from aiogram.types import ChatMemberMember

from bot.telegram.session import BotApiSession
from tests.support.fake_telegram import TOKEN

MESSAGE = {
    "message_id": 7,
    "date": 0,
    "chat": {"id": 1, "type": "private"},
    "from": {"id": 5, "is_bot": False, "first_name": "A"},
    "text": "hi",
    "reply_markup": {"inline_keyboard": [[{"text": "b", "callback_data": "x"}]]},
}
TAP = {"id": "q", "from": {"id": 5, "is_bot": False, "first_name": "A"}, "chat_instance": "c"}
MEMBER = {"status": "member", "user": {"id": 5, "is_bot": False, "first_name": "A"}}
SEND = SendMessage(chat_id=1, text="x")
ANSWERS: list[tuple[TelegramMethod[Any], int, Any]] = [
    (SEND, 200, {"ok": True, "result": MESSAGE}),
    (GetUpdates(), 200, {"ok": True, "result": []}),
    (
        GetUpdates(),
        200,
        {
            "ok": True,
            "result": [
                {"update_id": 1, "message": MESSAGE},
                {"update_id": 2, "callback_query": {**TAP, "message": MESSAGE}},
            ],
        },
    ),
    (EditMessageText(chat_id=1, message_id=7, text="x"), 200, {"ok": True, "result": MESSAGE}),
    (EditMessageText(chat_id=1, message_id=7, text="x"), 200, {"ok": True, "result": True}),
    (AnswerCallbackQuery(callback_query_id="q"), 200, {"ok": True, "result": True}),
    (GetMe(), 200, {"ok": True, "result": {"id": 1, "is_bot": True, "first_name": "B"}}),
    (GetMyCommands(), 200, {"ok": True, "result": [{"command": "a", "description": "b"}]}),
    (GetChatMemberCount(chat_id=1), 200, {"ok": True, "result": 3}),
    (ExportChatInviteLink(chat_id=1), 200, {"ok": True, "result": "https://t.me/+x"}),
    (GetChatMember(chat_id=1, user_id=5), 200, {"ok": True, "result": MEMBER}),  # aiogram's way
    # shapes the types refuse: aiogram's ClientDecodeError either way
    (SEND, 200, {"ok": True, "result": {"message_id": "seven"}}),
    (SEND, 200, {"ok": True, "result": [1]}),
    (GetUpdates(), 200, {"ok": True, "result": [{"update_id": 1}, 5]}),
    (SEND, 200, {"no": "envelope"}),
    # errors, each as aiogram raises it
    (
        SEND,
        429,
        {
            "ok": False,
            "error_code": 429,
            "description": "Too Many Requests: retry after 3",
            "parameters": {"retry_after": 3},
        },
    ),
    (
        SEND,
        400,
        {"ok": False, "error_code": 400, "description": "Bad Request: message is not modified"},
    ),
    (SEND, 400, {"ok": False, "description": "moved", "parameters": {"migrate_to_chat_id": -100}}),
    (SEND, 401, {"ok": False, "description": "Unauthorized"}),
    (SEND, 403, {"ok": False, "description": "Forbidden: bot was blocked by the user"}),
    (SEND, 404, {"ok": False, "description": "Not Found"}),
    (SEND, 409, {"ok": False, "description": "Conflict: terminated by other getUpdates"}),
    (SEND, 413, {"ok": False, "description": "Request Entity Too Large"}),
    (SEND, 500, {"ok": False, "description": "Internal Server Error"}),
    (SEND, 502, {"ok": False, "description": "Bad Gateway: restart"}),
    (SEND, 418, {"ok": False, "description": "I'm a teapot"}),
    (SEND, 200, {"ok": False, "description": "odd"}),
]


def _outcome(session: AiohttpSession, bot: Bot, method: Any, status: int, body: str) -> Any:
    try:
        return session.check_response(bot, method, status, body).result
    except Exception as exc:  # noqa: BLE001 — the error is the outcome compared
        said = str(exc)
        if isinstance(exc, ClientDecodeError):  # pydantic's own words name the model it read
            said = said.splitlines()[0]
        return type(exc), said, getattr(exc, "retry_after", None)


@pytest.mark.parametrize(("method", "status", "body"), ANSWERS)
async def test_an_answer_reads_as_aiogram_reads_it(method, status, body):
    ours, theirs = BotApiSession(), AiohttpSession()
    bot = Bot(TOKEN, session=ours)
    try:
        text = json.dumps(body)
        mine, aiograms = (
            _outcome(ours, bot, method, status, text),
            _outcome(theirs, bot, method, status, text),
        )
        assert mine == aiograms
        assert type(mine) is type(aiograms)
        for model in mine if isinstance(mine, list) else [mine]:
            if hasattr(model, "bot"):
                assert model.bot is bot  # the types reach the bot, as aiogram's do
    finally:
        await ours.close()
        await theirs.close()


def test_the_types_answers_build_no_response_model_of_their_own():
    """Sending, editing, polling and tapping read their answers without ``Response[Message]``,
    ``Response[list[Update]]`` or ``Response[Message | bool]`` (3 MB of copied validators)."""
    from tests.test_architecture import _fresh

    built = _fresh(
        "import json\n"
        "from aiogram import Bot\n"
        "from aiogram.methods import Response, SendMessage, GetUpdates, EditMessageText\n"
        "from bot.telegram.session import BotApiSession\n"
        "s = BotApiSession(); b = Bot('1:A', session=s)\n"
        "def read(method, result):\n"
        "    s.check_response(b, method, 200, json.dumps({'ok': True, 'result': result}))\n"
        f"m = {MESSAGE!r}\n"
        "read(SendMessage(chat_id=1, text='x'), m)\n"
        "read(GetUpdates(), [{'update_id': 1, 'message': m}])\n"
        "read(EditMessageText(chat_id=1, message_id=1, text='x'), True)\n"
        "print(sorted(c.__name__ for c in Response.__subclasses__()))\n"
    )
    assert built.strip() == "['Response[Any]']"


async def test_a_response_model_aiogram_builds_is_built_once_per_process():
    session = BotApiSession()
    bot = Bot(TOKEN, session=session)
    try:
        answer = session.check_response(
            bot,
            GetChatMember(chat_id=1, user_id=5),
            200,
            json.dumps({"ok": True, "result": MEMBER}),
        )
        assert isinstance(answer.result, ChatMemberMember)
        kept = weakref.ref(Response[GetChatMember.__returning__])  # type: ignore[name-defined]
        del answer  # an instance holds its class: without it only the session may
        gc.collect()
        assert kept() is not None  # still cached: the next call does not rebuild it
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
