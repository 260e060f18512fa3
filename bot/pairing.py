"""``detach init``: pair this machine's bot with its owner instead of copying ids by hand. It
asks for the token, checks it with Telegram, waits for a /start sent to the bot, shows who sent
it, and only after the person at the terminal confirms writes the token and that user's id to
the settings file. Nobody becomes allowed without that confirmation on the machine."""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

from aiogram import Bot
from aiogram.client.session.aiohttp import AiohttpSession
from aiogram.client.telegram import TelegramAPIServer
from aiogram.exceptions import AiogramError, TelegramConflictError, TelegramUnauthorizedError
from aiogram.types import Message, User

from bot.errors import ConfigError
from bot.models import Phrase
from bot.settings import TOKEN_SHAPE
from bot.telegram.terminal_texts import TerminalTexts

WAIT_S = 300.0  # how long to wait for the /start
Ask = Callable[[str], str]


def pair(
    env_file: Path,
    api_url: str,
    token: str | None = None,
    ask: Ask = input,
    say: Callable[[str], None] | None = None,
    wait_s: float = WAIT_S,
) -> int:
    """Pair, writing ``env_file`` only on the person's yes; returns the exit code. ``ask``
    and ``say`` are the terminal (a test scripts them), whose locale picks the language; a
    token typed at a real terminal is not echoed."""
    say = say or partial(print, flush=True)
    words = TerminalTexts(os.environ)
    if token is None:
        prompt = words("shell.pair_token_prompt")
        token = getpass.getpass(prompt) if ask is input and sys.stdin.isatty() else ask(prompt)
    token = token.strip()
    if not TOKEN_SHAPE.fullmatch(token):
        raise ConfigError(Phrase("shell.pair_not_a_token"))
    user = asyncio.run(_wait_for_start(token, api_url, lambda w: say(words.say(w)), wait_s))
    name = " ".join(p for p in (user.first_name, user.last_name) if p)
    handle = f" (@{user.username})" if user.username else ""
    if not _yes(ask, words, words("shell.pair_allow", name=name, handle=handle, id=user.id)):
        say(words("shell.pair_nothing_written"))
        return 1
    preflight = _yes(ask, words, words("shell.pair_preflight"))
    allowed = _write(env_file, token, user.id, {"DETACH_PREFLIGHT": "on"} if preflight else {})
    say(words("shell.pair_wrote", path=str(env_file), users=allowed))
    return 0


def _yes(ask: Ask, words: TerminalTexts, prompt: str) -> bool:
    """The person typed yes (in the terminal's language or in English); anything else (an
    empty line, the input closed) is a no."""
    try:
        return ask(prompt).strip().lower() in words("shell.yes_words").split()
    except EOFError:
        return False


async def _wait_for_start(
    token: str, api_url: str, say: Callable[[Phrase], None], wait_s: float
) -> User:
    """The sender of the first /start in a private chat; it is confirmed to Telegram here,
    so the bot does not see it again."""
    session = AiohttpSession(api=TelegramAPIServer.from_base(api_url))
    bot = Bot(token, session=session)
    try:
        try:
            me = await bot.get_me()
        except TelegramUnauthorizedError:
            raise ConfigError(Phrase("shell.pair_rejected")) from None
        say(Phrase("shell.pair_send_start", {"bot": str(me.username)}))
        offset = None
        async with asyncio.timeout(wait_s):
            while True:
                try:
                    updates = await bot.get_updates(offset=offset, timeout=10)
                except TelegramConflictError:
                    raise ConfigError(Phrase("shell.pair_conflict")) from None
                for update in updates:
                    offset = update.update_id + 1
                    message = update.message
                    if (
                        message is not None
                        and message.chat.type == "private"
                        and message.from_user is not None
                        and (message.text or "").split("@")[0].strip() == "/start"
                    ):
                        await bot.get_updates(offset=offset, timeout=0)  # handled here
                        await _answer_start(bot, message)
                        return message.from_user
    except TimeoutError:
        raise ConfigError(Phrase("shell.pair_timeout", {"seconds": f"{wait_s:.0f}"})) from None
    finally:
        await session.close()


async def _answer_start(bot: Bot, message: Message) -> None:
    """Tell the phone where the pairing goes on, in the sender's language. Pairing runs
    before the bot has a database (so no outbox): one direct, best-effort send; a failure
    to say it does not stop the pairing at the terminal."""
    from bot.telegram.texts import Texts

    user = message.from_user
    try:
        texts = Texts()
        text = texts.get(texts.pick(user.language_code if user else None), "pairing.confirm")
    except (ConfigError, KeyError):  # catalogs not compiled: English is better than nothing
        text = "Confirm in the terminal where you ran <code>detach init</code>."
    with contextlib.suppress(AiogramError):
        await bot.send_message(message.chat.id, text, parse_mode="HTML")


def _write(env_file: Path, token: str, user_id: int, more: dict[str, str]) -> str:
    """Set the token and add the user to the allowed ones, and set ``more``'s variables,
    keeping every other line; the file is the owner's alone (0600: it holds the token)."""
    lines = env_file.read_text().splitlines() if env_file.exists() else []
    allowed = [user_id]
    kept = []
    for line in lines:
        key = line.split("=", 1)[0].strip()
        if key == "DETACH_ALLOWED_USERS":
            value = line.split("=", 1)[1].split("#")[0]
            allowed = [int(p) for p in value.replace(" ", "").split(",") if p.lstrip("-").isdigit()]
            allowed += [user_id] if user_id not in allowed else []
        elif key != "DETACH_BOT_TOKEN" and key not in more:
            kept.append(line)
    users = ",".join(str(u) for u in allowed)
    env_file.parent.mkdir(parents=True, exist_ok=True)
    head = [f"DETACH_BOT_TOKEN={token}", f"DETACH_ALLOWED_USERS={users}"]
    head += [f"{k}={v}" for k, v in more.items()]
    text = "\n".join([*head, *kept]) + "\n"
    fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
    return users
