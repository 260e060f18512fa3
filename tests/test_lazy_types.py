"""aiogram's Telegram types and API methods are built when first used (bot/lazy_types.py), in a
fresh process so that nothing else has touched them yet."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import ROOT

PROBE = """
import json, resource
import bot.app  # everything the bot imports
from aiogram import methods, types
from pydantic import BaseModel

built_at_import = sorted(
    name for name in types.__all__
    if isinstance(getattr(types, name), type) and issubclass(getattr(types, name), BaseModel)
    and getattr(types, name).__pydantic_complete__
)
methods_built = sorted(
    name for name in methods.__all__
    if isinstance(getattr(methods, name), type) and issubclass(getattr(methods, name), BaseModel)
    and getattr(methods, name).__pydantic_complete__
)
send = methods.SendMessage(
    chat_id=3, text="hi", reply_markup={"inline_keyboard": [[{"text": "x", "callback_data": "y"}]]}
)
chat = {"id": 3, "type": "private"}
update = types.Update.model_validate({
    "update_id": 1,
    "message": {"message_id": 2, "date": 0, "chat": chat,
                "from": {"id": 4, "is_bot": False, "first_name": "A"}, "text": "hi",
                "reply_to_message": {"message_id": 1, "date": 0, "chat": chat}},
})
query = types.Update.model_validate({
    "update_id": 2,
    "callback_query": {"id": "q", "from": {"id": 4, "is_bot": False, "first_name": "A"},
                       "chat_instance": "c", "data": "t:cancel:1"},
})
markup = types.InlineKeyboardMarkup(
    inline_keyboard=[[types.InlineKeyboardButton(text="x", callback_data="t:cancel:1")]]
)

import asyncio
from bot import lazy_types
asyncio.run(lazy_types.warm())  # what `detach run` builds once polling started
warmed = [
    name for name in (*lazy_types.FIRST_USED, *lazy_types.FIRST_CALLED)
    if not (getattr(types, name, None) or getattr(methods, name)).__pydantic_complete__
]

class Local(BaseModel):
    child: "Child | None" = None

class Child(BaseModel):
    n: int = 0

Local.model_rebuild()  # other models resolve names from the caller, as before
print(json.dumps({
    "built_at_import": len(built_at_import),
    "methods_built_at_import": methods_built,
    "not_warmed": warmed,
    "send": [type(send.reply_markup).__name__, send.reply_markup.inline_keyboard[0][0].text],
    "text": update.message.text,
    "reply_to": update.message.reply_to_message.message_id,
    "data": query.callback_query.data,
    "markup": markup.model_dump(exclude_none=True),
    "local": Local.model_validate({"child": {"n": 3}}).child.n,
    "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
}))
"""


def test_telegram_types_are_built_on_first_use_and_work():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["built_at_import"] < 20, found  # of ~300 types; eagerly: every one
    # of ~190 API methods only the base classes (TelegramMethod, Request, Response)
    assert len(found["methods_built_at_import"]) <= 3, found
    assert found["send"] == ["InlineKeyboardMarkup", "x"]  # a method built on its first use
    assert found["not_warmed"] == []  # what the first task uses is built before it comes
    assert (found["text"], found["reply_to"], found["data"]) == ("hi", 1, "t:cancel:1")
    assert found["markup"] == {"inline_keyboard": [[{"text": "x", "callback_data": "t:cancel:1"}]]}
    assert found["local"] == 3


# What bot/lazy_types.py and bot/telegram/answers.py were measured against. A move of any of
# them is a decision: re-run this file and tests/test_session.py, re-measure `make bench`'s
# start and idle RSS, then update the pins in pyproject.toml and here together.
TUNED_WITH = {"aiogram": "3.31.0", "pydantic": "2.13.5", "pydantic-core": "2.46.5"}


def test_the_tuned_libraries_are_the_versions_the_tuning_was_measured_with():
    from importlib.metadata import version

    installed = {name: version(name) for name in TUNED_WITH}
    assert installed == TUNED_WITH, (
        "the start-up tuning (bot/lazy_types.py's deferred build, bot/telegram/answers.py's copy "
        f"of aiogram's check_response) was measured with {TUNED_WITH}, not {installed}: re-measure "
        "it before moving these pins"
    )
