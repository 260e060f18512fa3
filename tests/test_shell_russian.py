"""The terminal speaks its locale's language: the real `detach` subcommands as subprocesses on a
real SQLite file, their answers and their mistakes, in Russian under ``LANG=ru_RU.UTF-8`` (no
English word, by the Russian chat's own checker) and in English under ``LANG=C``; what machines
read (the task file, its JSON lines) is the same in both."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bot.telegram.terminal_texts import terminal_locale
from tests.conftest import ROOT
from tests.support.fake_telegram import TOKEN, FakeTelegram
from tests.support.harness import OWNER
from tests.support.terminal import Terminal
from tests.test_russian_chat import english_words

# what a terminal's words may hold besides the chat's: how to call it, the program's (and its
# command's) name before its complaints, a command to type, an option, a bot's handle, a
# file's name, a value's type
NOT_WORDS = re.compile(r"^вызов: .*|^detach( \w+)?:|`[^`]*`|--\w+|@\w+|\.env\S*|\(int\)", re.M)


def detach(tmp_path: Path, *args: str, **locale: str) -> subprocess.CompletedProcess[str]:
    """``detach args`` in ``tmp_path``, with only ``locale``'s variables of the locale set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DETACH_", "LC_", "LANG"))}
    env.update(
        HOME=str(tmp_path),  # no settings file of the machine's
        PYTHONPATH=str(ROOT),
        DETACH_DATA_DIR=str(tmp_path / "data"),
        DETACH_ALLOWED_USERS="111",
        DETACH_ALLOWED_WORKDIRS=str(tmp_path),
        **locale,
    )
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def english(printed: str) -> list[str]:
    return english_words(NOT_WORDS.sub(" ", printed).replace("<", "&lt;"))


SLOW = pytest.mark.slow  # real `detach` processes, seconds each (as tests/test_cli.py's)
# each command, and the exit code it ends with: answers, then mistakes
SESSION = (
    (("list",), 2),  # no database yet
    (("add", "--mode", "ask", "--model", "sonnet", "Составь", "отчёт"), 0),
    (("add", "Убери", "мусор"), 0),  # through the inbox: no bot numbers it yet
    (("add", "--worktree", "Обнови", "версию"), 1),  # not a repository
    (("add", "mode=быстро", "Привет"), 1),
    (("list",), 0),
    (("show", "1"), 0),
    (("show", "9"), 1),
    (("export", "99"), 1),
    (("export", "99", "--jsonl"), 1),
    (("archive",), 1),
    (("archive", "1"), 1),  # still active
    (("archive", "--all"), 0),
    (("board",), 2),  # no token
    (("run",), 2),
    (("worker",), 2),  # no PostgreSQL
    (("mcp", "--http", "где-то"), 2),
    (("show", "пятый"), 2),  # argparse's own refusal
    (("add",), 2),
)


@SLOW
def test_a_russian_terminal_reads_russian_from_start_to_end(tmp_path):
    english_found = {}
    for args, code in SESSION:
        done = detach(tmp_path, *args, LANG="ru_RU.UTF-8")
        printed = done.stdout + done.stderr
        assert done.returncode == code, (args, printed)
        assert re.search("[а-яё]", printed), (args, printed)
        if found := english(printed):
            english_found[" ".join(args)] = (found, printed)
    assert english_found == {}, english_found
    shown = detach(tmp_path, "show", "1", LANG="ru_RU.UTF-8").stdout
    assert "[в очереди]" in shown and "цель: Составь отчёт" in shown


@SLOW
def test_a_c_locale_reads_english(tmp_path):
    said = {
        args: detach(tmp_path, *args, LANG="C.UTF-8")
        for args, _ in SESSION
        if args[0] in ("add", "list", "export", "archive", "run")
    }
    added = said[("add", "--mode", "ask", "--model", "sonnet", "Составь", "отчёт")]
    assert "#1 sostav-otchet queued; no bot is running" in added.stdout
    assert "queued, not numbered yet" in said[("add", "Убери", "мусор")].stdout
    assert "needs a git repository" in said[("add", "--worktree", "Обнови", "версию")].stderr
    assert "no task #99 (`detach list` lists them)" in said[("export", "99")].stderr
    assert "give a task id or --all" in said[("archive",)].stderr
    assert "archived 0 tasks" in said[("archive", "--all")].stdout
    assert "Detach needs a Telegram bot token" in said[("run",)].stderr
    for args, done in said.items():
        printed = done.stdout + done.stderr
        for typed in args:  # the words typed are quoted as they are
            printed = printed.replace(typed.removeprefix("mode="), "")
        assert not re.search("[а-яё]", printed), done


@SLOW
def test_what_machines_read_is_the_same_in_every_language(tmp_path):
    assert detach(tmp_path, "add", "--mode", "ask", "Составь", "отчёт").returncode == 0
    for args in (("export", "1", "--jsonl"), ("export", "1")):  # a queued task: no events yet
        russian = detach(tmp_path, *args, LANG="ru_RU.UTF-8")
        english_ = detach(tmp_path, *args, LANG="C")
        assert russian.returncode == english_.returncode == 0, russian.stderr
        assert russian.stdout == english_.stdout
    assert "# Goal\n\nСоставь отчёт\n" in russian.stdout  # the task file's own headings


@pytest.mark.parametrize(
    ("environ", "locale"),
    [
        ({"LANG": "ru_RU.UTF-8"}, "ru"),
        ({"LANG": "ru_RU.UTF-8", "LC_ALL": "C"}, "en"),  # LC_ALL first
        ({"LANG": "en_US.UTF-8", "LC_MESSAGES": "ru_UA.UTF-8"}, "ru"),  # then LC_MESSAGES
        ({"LANG": "C", "LC_ALL": ""}, "en"),  # an empty one is not set
        ({"LANG": "de_DE.UTF-8"}, "en"),  # a language without a catalog
        ({}, "en"),
    ],
)
def test_the_locale_is_the_first_variable_set(environ, locale):
    assert terminal_locale(environ) == locale


@SLOW
def test_a_russian_locale_under_an_english_lc_all_reads_english(tmp_path):
    done = detach(tmp_path, "archive", LANG="ru_RU.UTF-8", LC_ALL="C.UTF-8")
    assert "give a task id or --all" in done.stderr
    done = detach(tmp_path, "archive", LANG="C.UTF-8", LC_MESSAGES="ru_RU.UTF-8")
    assert "укажите номер задачи" in done.stderr


@SLOW
async def test_detach_init_asks_and_answers_in_russian(tmp_path):
    """The pairing dialogue at a Russian terminal: its questions, a Russian yes (``д``) to
    each, and what it wrote, with no English word; the settings file is written."""
    async with FakeTelegram() as fake:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DETACH_", "XDG_", "LC_"))}
        env.update(
            HOME=str(tmp_path),
            LANG="ru_RU.UTF-8",
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
            DETACH_TELEGRAM_API_URL=fake.base_url,
        )
        term = await Terminal.start(tmp_path, env, "init")
        await term.until_printed("Токен бота")
        term.type(TOKEN)
        await term.until_printed("Отправьте сейчас /start")
        await fake.user_message("/start", OWNER, language_code="ru")
        await term.until_printed("Разрешить пользоваться ботом? [д/Н]")
        term.type("д")
        await term.until_printed("спрашивать дешёвую модель")
        term.type("да")
        code, printed = await term.close()
    assert code == 0, printed
    assert "Записано в" in printed and english(printed) == [], printed
    written = (tmp_path / ".config" / "detach" / "env").read_text().splitlines()
    assert f"DETACH_ALLOWED_USERS={OWNER}" in written and "DETACH_PREFLIGHT=on" in written


@SLOW
def test_the_help_and_argparse_speak_the_terminals_language(tmp_path):
    """Our help texts from the catalogs, argparse's own words (usage, headings, its refusals)
    from gettext's ``argparse`` domain in ``locales/``."""
    russian = detach(tmp_path, "add", "--help", LANG="ru_RU.UTF-8").stdout
    assert "вызов: detach add" in russian and "параметры:" in russian, russian
    assert "показать эту справку и выйти" in russian and "рабочая папка" in russian
    english_ = detach(tmp_path, "add", "--help", LANG="C.UTF-8").stdout
    assert "usage: detach add" in english_ and "working directory" in english_, english_
    top = detach(tmp_path, "--help", LANG="ru_RU.UTF-8").stdout
    assert "связать бота с вами" in top and "папка данных: DETACH_DATA_DIR" in top, top
    refused = detach(tmp_path, "export", "x", LANG="ru_RU.UTF-8").stderr
    assert "ошибка: аргумент id: недопустимое значение" in refused, refused


@SLOW
def test_show_says_a_failed_turn_and_its_check_in_russian(tmp_path):
    """`detach show` of a turn that failed (its stored error said in the terminal's language)
    and of its failed check (a decimal as the language writes it)."""
    from bot.models import CheckResult, TaskStatus, TurnError
    from bot.store import Store
    from bot.store.task_rows import TurnOutcome

    assert detach(tmp_path, "add", "--mode", "ask", "Почини", "тесты").returncode == 0

    async def ended() -> None:
        store = await Store.open(f"sqlite:///{tmp_path / 'data' / 'detach.sqlite'}")
        try:
            turn = await store.tasks.last_turn(1)
            assert turn is not None
            error = TurnError("turn_error.timed_out")
            await store.tasks.finish_turn(turn, TurnOutcome(TaskStatus.FAILED, error=error))
            check = CheckResult("make test", False, 2, "упало тестов: 2\n", 1.5, 1)
            await store.checks.record(1, turn.id, check)
        finally:
            await store.close()

    asyncio.run(ended())
    russian = detach(tmp_path, "show", "1", LANG="ru_RU.UTF-8")
    out = russian.stdout
    assert russian.returncode == 0, russian.stderr
    assert "проверка не пройдена (код 2) в раунде 1, 1,5 s:\n  упало тестов: 2" in out, out
    assert "ход 1 [ошибка] стоимость неизвестна\nистекло время хода" in out, out
    assert english(out) == [], out
    english_ = detach(tmp_path, "show", "1", LANG="C.UTF-8").stdout
    assert "check failed (exit 2) in round 1, 1.5 s:" in english_, english_


@SLOW
def test_mistakes_in_the_settings_read_in_the_terminals_language(tmp_path):
    """A setting in the settings file that is not a number, a settings file named but missing:
    said in Russian, with the variable to fix; English under ``LANG=C``."""
    settings = tmp_path / "settings.env"
    settings.write_text("DETACH_MAX_CONCURRENT_TURNS=много\n")
    bad = {"DETACH_ENV_FILE": str(settings)}
    missing = {"DETACH_ENV_FILE": str(tmp_path / "нет.env")}
    for extra, needle in ((bad, "DETACH_MAX_CONCURRENT_TURNS"), (missing, "DETACH_ENV_FILE")):
        ru = detach(tmp_path, "list", LANG="ru_RU.UTF-8", **extra)
        assert ru.returncode == 2 and needle in ru.stderr, ru.stderr
        assert re.search("[а-я]", ru.stderr.split(":", 1)[1]), ru.stderr
        en = detach(tmp_path, "list", LANG="C", **extra)
        assert en.returncode == 2 and needle in en.stderr, en.stderr
        shown = en.stderr.replace(str(tmp_path / "нет.env"), "").replace("много", "")
        assert not re.search("[а-я]", shown), en.stderr
