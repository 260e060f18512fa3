"""A whole Russian session, end to end: the real bot over HTTP against the fake Bot API, the real
pinned claude against the scripted model server, every message from a Russian Telegram user.
/status, /every, /at, a Cyrillic goal and a few mistakes: nothing the chat receives is English,
but for what is not language (commands, engine names, paths, numbers and units, values)."""

from __future__ import annotations

import html
import re

import pytest

from bot.app import _say_missing_engine as say_missing_engine
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

# words that are no language: names (of engines, tools, programs, zones, languages as their
# speakers write them), and values a person types (options, /notify's policies, ids)
NOT_LANGUAGE = {
    *("Detach", "Claude", "Code", "Codex", "Local", "claude", "codex", "local", "Telegram"),
    *("managed", "Managed", "Agents", "Anthropic", "cloud"),  # the remote route
    *("Bash", "git", "bubblewrap", "PID", "kill", "apt", "install", "crontab", "worktree"),
    *("UTC", "Europe", "Berlin", "English"),
    *("sonnet", "opus", "haiku", "ask", "sandbox", "auto", "readonly", "yes", "no"),
    *("all", "done", "quiet", "id"),
    *("s", "m", "h", "ms", "min", "USD"),
}
SESSION_GOAL = "напиши файл MARKRU"


@pytest.fixture
def chat():
    mock = ChatMock().start()
    yield mock
    mock.stop()


def english_words(shown: str) -> list[str]:
    """The words in Latin letters that ``shown`` (Telegram HTML) puts before a reader, outside
    code, commands, settings' names, paths, links and the slug of the goal's label."""
    text = re.sub(r"<code>.*?</code>|<pre>.*?</pre>", " ", shown, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", " ", text))
    text = re.sub(r"#\d+ [a-z0-9-]+", " ", text)  # a task's label: its goal's words
    text = re.sub(r"https?://\S+|\S*/\S*|\b[A-Z][A-Z0-9_]{2,}\b|\S+=\S*|\w+_\w+", " ", text)
    text = re.sub(r"\S*\d\S*", " ", text)  # numbers, units, model names, references
    text = re.sub(r"\b[A-Z]\w*[a-z][A-Z]\w*", " ", text)  # an error's class: ConnectError
    text = text.replace(SESSION_GOAL, " ")
    words = re.findall(r"[A-Za-z][A-Za-z'/.-]*[A-Za-z]|[A-Za-z]", text)
    names = [w for w in words if "-" in w or w.startswith("MARK")]  # models, slugs, the goals
    return [w for w in words if w not in NOT_LANGUAGE and w not in names]


def received(fake: FakeTelegram) -> list[str]:
    """Every text the chat was shown: messages, their edits, captions, button labels, toasts."""
    shown = []
    for call in fake.calls:
        if not call.ok:
            continue
        p = call.params
        shown += [p[k] for k in ("text", "caption") if isinstance(p.get(k), str)]
        markup = p.get("reply_markup")
        if isinstance(markup, dict):
            for row in markup.get("inline_keyboard", []):
                shown += [b["text"] for b in row]
    return shown


async def test_a_russian_chat_reads_russian_from_start_to_end(
    tmp_path, claude_bin, agent_env, anthropic, workdir, chat
):
    anthropic.script("MARKRU", [{"text": "Файл написан: в нём одна строка."}])
    touch = {"name": "Bash", "input": {"command": "touch da.txt", "description": "создать файл"}}
    anthropic.script("MARKASK", [{"tool_use": touch}, {"text": "Создал файл."}])
    async with FakeTelegram() as fake:
        local = {"local_base_url": chat.base_url, "local_model": "mock-model"}
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, **local)
        async with running_bot(settings, agent_env) as app:
            await app.settle()

            async def say(text: str, needle: str, timeout_s: float = 30) -> str:
                mark = len(fake.calls)
                await fake.user_message(text, OWNER, language_code="ru")
                answer = await fake.wait_shown(OWNER, needle, timeout_s, after=mark)
                return answer.params["text"]

            status = await say("/status", "Движки")
            assert "песочница" in status and "(доступен, 1 модель)" in status
            added = await say("/every day 09:00 проверь диск", "S1")
            assert re.search(r"(пн|вт|ср|чт|пт|сб|вс) \d+ \w+\.? 09:00", added), added
            await say("/at завтра 18:30 напомни про отчёт", "S2")
            await say("/every иногда проверь", "иногда")
            await say("/cd nosuchdir", "nosuchdir")
            await say("/every", "/every")
            await say(f"/claude {SESSION_GOAL}", "#1 napishi-fayl-markru")
            await fake.wait_shown(OWNER, "Файл написан", timeout_s=90)
            await say("/tasks", "napishi-fayl-markru")
            await say("/result 1", "Файл написан")
            await say("/claude mode=ask MARKASK создай файл", "#2 markask-sozday-fayl")
            ask = await fake.wait_shown(OWNER, "touch da.txt", timeout_s=60)
            allow = next(
                b["callback_data"]
                for row in ask.params["reply_markup"]["inline_keyboard"]
                for b in row
                if b["text"].startswith("✅")
            )
            await fake.press(OWNER, ask.result["message_id"], allow, OWNER, language_code="ru")
            await fake.wait_shown(OWNER, "Создал файл", timeout_s=60)
            chat.script("MARKLOCAL", [{"text": "Ответ модели."}])
            await say("/local MARKLOCAL ответь", "Ответ модели", timeout_s=60)
            chat.stop()  # the endpoint is gone: the next turn fails, saying why in Russian
            await say("/local MARKGONE ответь", "не удаётся связаться", timeout_s=60)
            anthropic.script("MARKSLOW", [{"stall": 30}])
            await say("/claude MARKSLOW подожди", "#5 markslow-podozhdi")
            await fake.wait_shown(OWNER, "выполняется", timeout_s=30)
            await say("/result 5", "#5")
            await say("/cancel 5", "#5")
            await fake.wait_shown(OWNER, "отменена", timeout_s=30)
            await say("/cancel 5", "#5")
            await say("/archive 5", "#5")
            await say("/export 1", "")
            for command, needle in (
                ("/help", "/detach"),
                ("/spend", ""),
                ("/tz Europe/Berlin", "Europe/Berlin"),
                ("/schedules", "S2"),
                ("/limits", ""),
                ("/pending", ""),
                ("/model", ""),
                ("/grants", ""),
                ("/notify", ""),
                ("/audit", ""),
                ("/lang", "Русский"),
            ):
                await say(command, needle)
    english = {text: found for text in received(fake) if (found := english_words(text))}
    assert english == {}, "\n\n".join(f"{found}: {text}" for text, found in english.items())


async def test_the_start_up_notice_goes_to_each_owner_in_their_language(tmp_path, workdir):
    """The default engine cannot run here: each allowed user hears it in the language they
    chose (English for one who chose none)."""
    other = OWNER + 1
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            str(tmp_path / "no-claude"),
            workdir,
            allowed_users=frozenset({OWNER, other}),
        )
        async with running_bot(settings, {"PATH": "/usr/bin:/bin"}) as app:
            await app.store.users.set_locale(OWNER, "ru")
            await app.settle()
            await say_missing_engine(app)
            await fake.wait_text(OWNER, "Detach запущен, но <b>claude</b>")
            await fake.wait_text(other, "Detach started, but <b>claude</b>")
