"""Bad input gets a clear, localized reply and loses nothing: long quotes, odd digits, NUL
bytes, absurd amounts, duplicate options, crontab lines that never fire, forged callback data,
lone surrogates, edited messages."""

from __future__ import annotations

import pytest

from bot.errors import UserInputError
from tests.test_handlers import OWNER, app, feed, message, press  # noqa: F401 (fixture)

INTERNAL = "Something went wrong"


@pytest.mark.parametrize(
    "typed",
    [
        "/cancel " + "x" * 5000,
        "/result " + "9" * 4500,
        "/cd " + "/nowhere" * 700,
        "/claude model=" + "z" * 4200 + " go",
        "/every " + "nonsense " * 600,
        "/tz " + "Europe/" * 700,
        "/claude mode=" + "q" * 4500 + " go",
    ],
)
async def test_error_replies_quote_briefly_and_always_fit(app, typed):  # noqa: F811
    session = await feed(app, message(typed[:9000]))
    replies = session.new_texts()
    assert replies and INTERNAL not in replies
    assert all(len(text) <= 4096 for text in session.texts()[session.mark :])


@pytest.mark.parametrize(
    ("typed", "needle"),
    [
        ("/cancel ²", "/cancel"),
        ("/result ³", "/result"),
        ("/export ¹", "/export"),
        ("/archive ²", "/archive"),
        ("/cd a\x00b", "a␀b"),
        ("/claude cwd=a\x00b go", "a␀b"),
        ("/claude max_usd=nan go", "nan"),
        ("/claude max_usd=inf go", "inf"),
        ("/claude max_usd=1e309 go", "1e309"),
        ("/claude max_usd=0.0000001 go", "0.0000001"),
        ("/claude mode=ask mode=auto go", "mode="),
        ("/every 0 0 * * 8 x", "0 0 * * 8"),
        ("/every 0 0 31 2 * x", "0 0 31 2 *"),
    ],
)
async def test_odd_input_gets_a_clear_reply(app, typed, needle):  # noqa: F811
    session = await feed(app, message(typed))
    replies = session.new_texts()
    assert INTERNAL not in replies and needle in replies
    assert await app.store.tasks.get(1) is None


async def test_a_lone_surrogate_starts_a_task_instead_of_failing(app):  # noqa: F811
    session = await feed(app, message("/claude mode=readonly hello \ud800 world"))
    assert INTERNAL not in session.new_texts()
    task = await app.store.tasks.get(1)
    assert task is not None and "\ud800" not in task.title


async def test_forged_callback_data_is_a_stale_button(app):  # noqa: F811
    session = await feed(app, press("t:cancel:" + "9" * 55))
    assert "no longer valid" in session.sent("AnswerCallbackQuery")[-1].text


async def test_a_forged_done_does_not_answer_a_single_choice_question(app):  # noqa: F811
    session = await feed(app, message("/claude mode=readonly pick"))
    task = await app.store.tasks.get(1)
    question = await app.store.questions.create(
        task.id,
        1,
        "question",
        {"text": "Which?", "header": "h", "options": ["keep", "delete everything"], "multi": False},
        None,
    )
    with pytest.raises(UserInputError):
        await app.dispatcher["answers"].on_option(OWNER, question.id, -1)
    assert (await app.store.questions.get(question.id)).status == "pending"
    assert session is not None


async def test_an_edited_message_is_answered(app):  # noqa: F811
    raw = message("/detach something")
    raw["edited_message"] = raw.pop("message")
    raw["edited_message"]["edit_date"] = raw["edited_message"]["date"]
    session = await feed(app, raw)
    assert "Edits are not read" in session.new_texts()
