"""From first run to daily use: one settings file and one data directory whatever the shell's
directory, setup mistakes said in one line, Telegram's absence waited out, the README's examples
valid as they stand."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer

from bot import config
from bot.errors import ConfigError
from bot.tasks.taskfile import parse
from bot.telegram.reach import REJECTED, reach_telegram
from bot.telegram.texts import Texts
from tests.conftest import ROOT
from tests.support import fake_claude
from tests.support.fake_telegram import TOKEN, FakeTelegram
from tests.support.harness import OWNER, process_env, stop_process
from tests.support.terminal import Terminal

GOOD_TOKEN = "123456789:AAEexampleexampleexampleexample12"


def detach(
    home: Path, cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The console script as a person runs it: no DETACH_ variables, HOME is ``home``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DETACH_", "XDG_"))}
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd,
        env={**base, "HOME": str(home), "PYTHONPATH": str(ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def write_env(home: Path, text: str) -> Path:
    path = home / ".config" / "detach" / "env"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_settings_file_is_found_the_same_way_from_anywhere(tmp_path):
    home, here = tmp_path / "home", tmp_path / "here"
    here.mkdir()
    env = {"HOME": str(home)}
    assert config.env_file(env, here) is None
    (here / ".env").write_text("DETACH_ALLOWED_USERS=5\n")
    assert config.env_file(env, here) == here / ".env"  # the last resort
    home_env = write_env(home, "DETACH_ALLOWED_USERS=7\n")
    assert config.env_file(env, here) == home_env  # the config home comes first
    chosen = tmp_path / "chosen.env"
    chosen.write_text("DETACH_ALLOWED_USERS=9\n")
    assert config.env_file({**env, "DETACH_ENV_FILE": str(chosen)}, here) == chosen
    with pytest.raises(ConfigError, match="no such file"):
        config.env_file({**env, "DETACH_ENV_FILE": str(tmp_path / "missing")}, here)
    assert str(home_env) in config.describe(env, here)


def test_detach_from_any_directory_uses_one_database(tmp_path):
    """`detach add` in one directory, `detach list` in another: the same tasks, in the XDG
    data directory; neither directory gets a ./data."""
    home, one, two = tmp_path / "home", tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    write_env(
        home,
        f"DETACH_ALLOWED_USERS=111   \nDETACH_ALLOWED_WORKDIRS={tmp_path}\n",
    )
    nothing = detach(home, two, "list")
    assert nothing.returncode != 0 and "no database" in nothing.stderr
    added = detach(home, one, "add", "--mode", "ask", "Count", "the", "files")
    assert added.returncode == 0, added.stderr
    listed = detach(home, two, "list")
    assert "#1 count-files" in listed.stdout, listed.stderr
    assert (home / ".local" / "share" / "detach" / "detach.sqlite").is_file()
    assert not (one / "data").exists() and not (two / "data").exists()
    helped = detach(home, two, "--help")
    assert f"settings file: {home / '.config' / 'detach' / 'env'}" in helped.stdout


def test_an_earlier_data_directory_is_kept_with_a_note(tmp_path):
    home, checkout = tmp_path / "home", tmp_path / "checkout"
    (checkout / "data").mkdir(parents=True)
    (checkout / "data" / "detach.sqlite").write_bytes(b"")
    settings, notes = config.load_settings({"HOME": str(home)}, checkout)
    assert settings.data_dir == (checkout / "data").resolve()
    said = Texts().say("en", notes[0]) if notes else ""
    assert "mv" in said and "DETACH_DATA_DIR" in said
    fresh, notes = config.load_settings({"HOME": str(home)}, tmp_path)
    assert fresh.data_dir == home / ".local" / "share" / "detach" and notes == []


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("DETACH_BOT_TOKEN=not-a-token-at-all", "DETACH_BOT_TOKEN"),
        ('DETACH_BOT_TOKEN="123456789:AAE example with spaces"', "DETACH_BOT_TOKEN"),
        ("DETACH_ALLOWED_USERS=@me", "DETACH_ALLOWED_USERS"),
        ("DETACH_ALLOWED_USERS=111,alice", "DETACH_ALLOWED_USERS"),
    ],
)
def test_each_setup_mistake_is_one_clear_line(tmp_path, line, says):
    home = tmp_path / "home"
    defaults = {"DETACH_BOT_TOKEN": GOOD_TOKEN, "DETACH_ALLOWED_USERS": "111"}
    key = line.split("=", 1)[0]
    path = write_env(
        home, "\n".join([line] + [f"{k}={v}" for k, v in defaults.items() if k != key]) + "\n"
    )
    ran = detach(home, tmp_path, "run")
    assert ran.returncode == 2
    assert "Traceback" not in ran.stderr and says in ran.stderr and str(path) in ran.stderr
    assert "not-a-token-at-all" not in ran.stderr and "AAE example" not in ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1, ran.stderr


def test_no_token_says_where_to_put_it(tmp_path):
    ran = detach(tmp_path / "home", tmp_path, "run")
    assert ran.returncode == 2 and "@BotFather" in ran.stderr
    assert str(tmp_path / "home" / ".config" / "detach" / "env") in ran.stderr


async def test_a_token_telegram_rejects_stops_the_bot_with_one_line(tmp_path, workdir):
    async with FakeTelegram() as fake:
        env = process_env(os.environ, fake, tmp_path / "data", "claude", workdir)
        env["DETACH_BOT_TOKEN"] = "999:REJECTED-token"
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "run",
            cwd=tmp_path,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            await stop_process(proc)
    text = err.decode()
    assert proc.returncode == 2 and REJECTED in text and "Traceback" not in text
    assert "REJECTED-token" not in text


async def test_no_network_at_start_is_waited_out_with_backoff(caplog):
    with socket_nobody_listens() as port:
        session = AiohttpSession(api=TelegramAPIServer.from_base(f"http://127.0.0.1:{port}"))
        bot = Bot(TOKEN, session=session)
        caplog.set_level(logging.WARNING, "bot.telegram.reach")
        try:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(1.0):
                    await reach_telegram(bot, first_wait_s=0.05, max_wait_s=0.2)
        finally:
            await session.close()
    tries = [r.getMessage() for r in caplog.records if "cannot reach Telegram" in r.getMessage()]
    assert len(tries) >= 3 and TOKEN not in " ".join(tries)
    waits = [float(re.search(r"in ([\d.]+) s", t).group(1)) for t in tries]  # type: ignore[union-attr]
    assert waits == sorted(waits)


async def test_reach_returns_once_telegram_answers():
    async with FakeTelegram() as fake:
        session = AiohttpSession(api=TelegramAPIServer.from_base(fake.base_url))
        try:
            me = await reach_telegram(Bot(TOKEN, session=session))
            assert me.is_bot
            with pytest.raises(ConfigError, match="401"):
                await reach_telegram(Bot("999:WRONG", session=session))
        finally:
            await session.close()


async def _start_notice(tmp_path: Path, fake: FakeTelegram, env: dict[str, str], text: str):  # type: ignore[no-untyped-def]
    """``detach run`` as its own process until the owner gets a message with ``text``."""
    with (tmp_path / "bot.log").open("w") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", cwd=tmp_path, env=env, stdout=log, stderr=log
        )
        try:
            return await fake.wait_text(OWNER, text, timeout_s=60)
        finally:
            await stop_process(proc)


async def test_a_missing_default_engine_is_told_in_telegram(tmp_path, workdir):
    async with FakeTelegram() as fake:
        env = process_env(os.environ, fake, tmp_path / "data", "/nonexistent/claude", workdir)
        notice = await _start_notice(tmp_path, fake, env, "cannot run on this machine")
        assert "claude" in notice.params["text"] and "/status" in notice.params["text"]


def test_the_readme_task_file_example_parses_as_it_stands():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```markdown\n(---\n.*?)```", readme, re.S)
    assert blocks, "the README has no task-file example"
    for block in blocks:
        parsed = parse(block)
        assert parsed.goal
    first = parse(blocks[0])
    assert first.chat_id == 123456789 and first.model == "sonnet"


class socket_nobody_listens:
    """A local port with nothing listening (bound, never listened on)."""

    def __enter__(self) -> int:
        import socket

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        return int(self._sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._sock.close()


def test_files_written_for_other_programs_are_readable_by_them(tmp_path):
    from bot.tasks.taskfile import write_atomic

    write_atomic(tmp_path / "done.md", "# Goal\n")
    assert (tmp_path / "done.md").stat().st_mode & 0o777 == 0o644


async def _pairing(
    tmp_path: Path,
    fake: FakeTelegram,
    confirm: str,
    language: str = "en",
    preflight: str | None = None,
) -> tuple[int, str, Path]:
    """`detach init` in a scripted terminal: the token typed, /start sent from the phone, the
    confirmation typed; ``preflight``: the answer to the preflight's question (None: the
    terminal closes before it)."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DETACH_", "XDG_"))}
    env.update(
        HOME=str(home),
        PYTHONPATH=str(ROOT),
        PYTHONUNBUFFERED="1",
        DETACH_TELEGRAM_API_URL=fake.base_url,
    )
    term = await Terminal.start(tmp_path, env, "init")
    await term.until_printed("Bot token")
    term.type(TOKEN)
    await term.until_printed("Send /start")
    await fake.user_message("/start", OWNER, language_code=language)
    await term.until_printed("Allow them")
    term.type(confirm)
    if preflight is not None:
        await term.until_printed("DETACH_PREFLIGHT=on")
        term.type(preflight)
    code, printed = await term.close()
    return code, printed, home / ".config" / "detach" / "env"


async def test_detach_init_pairs_the_owner_after_confirmation_on_the_machine(tmp_path):
    async with FakeTelegram() as fake:
        code, printed, env_file = await _pairing(tmp_path, fake, "y")
        assert code == 0, printed
        assert f"id {OWNER}" in printed
        # the phone is told where the pairing goes on, in the sender's language
        [answer] = fake.bot_messages(OWNER)
        assert "Confirm in the terminal where you ran detach init" in answer["text"]
        assert env_file.read_text().splitlines()[:2] == [
            f"DETACH_BOT_TOKEN={TOKEN}",
            f"DETACH_ALLOWED_USERS={OWNER}",
        ]
        assert env_file.stat().st_mode & 0o777 == 0o600
        settings, _ = config.load_settings({"HOME": str(tmp_path / "home")}, tmp_path)
        assert settings.allowed_users == {OWNER}
        assert not settings.preflight  # the terminal closed before the question: no


async def test_detach_init_offers_the_preflight(tmp_path):
    async with FakeTelegram() as fake:
        code, printed, env_file = await _pairing(tmp_path, fake, "y", preflight="y")
        assert code == 0, printed
        assert "DETACH_PREFLIGHT=on" in env_file.read_text().splitlines()
        settings, _ = config.load_settings({"HOME": str(tmp_path / "home")}, tmp_path)
        assert settings.preflight and settings.allowed_users == {OWNER}


async def test_detach_init_writes_nothing_without_confirmation(tmp_path):
    async with FakeTelegram() as fake:
        code, printed, env_file = await _pairing(tmp_path, fake, "n", language="ru")
        [answer] = fake.bot_messages(OWNER)  # in the sender's language
        assert "Подтвердите в терминале, где вы запустили detach init" in answer["text"]
    assert code == 1 and "Nothing was written" in printed and not env_file.exists()


async def test_the_bot_and_detach_in_another_directory_share_one_database(tmp_path, workdir):
    """The bot started from one directory with only the settings file (as systemd would), a
    task from Telegram; `detach list` in another directory shows it."""
    home, there = tmp_path / "home", tmp_path / "elsewhere"
    there.mkdir()
    agent = fake_claude.script(tmp_path)
    async with FakeTelegram() as fake:
        write_env(
            home,
            f"DETACH_BOT_TOKEN={TOKEN}\nDETACH_ALLOWED_USERS={OWNER}\n"
            f"DETACH_TELEGRAM_API_URL={fake.base_url}\nDETACH_WORKDIR={workdir}\n"
            f"DETACH_CLAUDE_BIN={agent}\n",
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DETACH_", "XDG_"))}
        env.update(HOME=str(home), PYTHONPATH=str(ROOT))
        log = (tmp_path / "bot.log").open("w")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bot", "run", cwd=tmp_path, env=env, stdout=log, stderr=log
        )
        try:
            await fake.wait_call("setMyCommands", timeout_s=60)
            await fake.user_message("/detach mode=ask Tidy the notes", OWNER)
            await fake.wait_text(OWNER, "tidy-notes", timeout_s=30)
            listed = await asyncio.to_thread(detach, home, there, "list")
            assert "#1 tidy-notes" in listed.stdout, listed.stderr + log.name
        finally:
            await stop_process(proc)
            log.close()
    assert not (tmp_path / "data").exists() and not (there / "data").exists()


BUILT = r"^(\S+ \S+) INFO bot\.app: first Telegram types built in (\d+) ms"


async def test_start_up_work_waits_until_the_first_poll_is_out(tmp_path, workdir):
    """Engines that answer their probes at once (none installed) must not put the rest of the
    start (the first Telegram types: ~0.4 s on the loop) before the first ``getUpdates``: it
    reaches Telegram before that work begins (the bot logs when it ended and how long it took;
    this process and the bot share the clock)."""
    async with FakeTelegram() as fake:
        env = process_env(os.environ, fake, tmp_path / "data", "/nonexistent/claude", workdir)
        log_path = tmp_path / "bot.log"
        with log_path.open("w") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bot", "run", cwd=tmp_path, env=env, stdout=log, stderr=log
            )
            try:
                async with asyncio.timeout(60):
                    while not (built := re.search(BUILT, log_path.read_text(), re.MULTILINE)):
                        assert proc.returncode is None, log_path.read_text()
                        await asyncio.sleep(0.01)
            finally:
                await stop_process(proc)
        ended = datetime.strptime(built[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        began = ended - int(built[2]) / 1000
        to_wall = time.time() - time.monotonic()
        polls = [at + to_wall for method, at in fake.arrivals if method == "getUpdates"]
        assert polls and polls[0] < began, (polls, began, log_path.read_text())


async def test_a_default_engine_without_a_login_is_told_in_telegram(tmp_path, workdir):
    agent = fake_claude.script(tmp_path)
    async with FakeTelegram() as fake:
        bare = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path / "home"), "LANG": "C.UTF-8"}
        env = process_env(bare, fake, tmp_path / "data", agent, workdir)
        env.pop("ANTHROPIC_API_KEY")
        notice = await _start_notice(tmp_path, fake, env, "finds no login")
        assert "claude" in notice.params["text"] and "/status" in notice.params["text"]
