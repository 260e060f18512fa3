"""`detach board`: a one-time sign-in link to the running bot's board, made in the shell.

The link is signed with a key derived from the bot token (``bot.board.auth``), which the shell
reads from the same settings as the bot, so nothing is written to the bot's database; the bot
refuses it after ``LINK_TTL_S``, after its first use, and if the bot started after it was made."""

from __future__ import annotations

import webbrowser

from bot.board.auth import link_key, make_link_token
from bot.errors import ConfigError
from bot.models import Phrase
from bot.settings import Settings


def board_link(settings: Settings, user_id: int | None = None) -> str:
    """The link for ``user_id`` (default: DETACH_MCP_CHAT, else the first allowed user).
    Raises ConfigError when the board is off or the user is not allowed."""
    if settings.bot_token is None:
        raise ConfigError(Phrase("shell.board_no_token"))
    if settings.board_port is None:
        raise ConfigError(Phrase("shell.board_off"))
    if not settings.allowed_users:
        raise ConfigError(Phrase("shell.board_no_users"))
    user = user_id or settings.mcp_chat or min(settings.allowed_users)
    if user not in settings.allowed_users:
        raise ConfigError(Phrase("shell.board_not_allowed", {"user": user}))
    if settings.public_url:
        base = settings.public_url.rstrip("/")
    elif settings.board_port == 0:
        raise ConfigError(Phrase("shell.board_port_zero"))
    else:
        host = "127.0.0.1" if settings.board_host in ("0.0.0.0", "") else settings.board_host
        base = f"http://{host}:{settings.board_port}"
    token = make_link_token(link_key(settings.bot_token.get_secret_value()), user)
    return f"{base}/signin?t={token}"


def run(settings: Settings, user_id: int | None, open_it: bool) -> int:
    link = board_link(settings, user_id)
    print(link)
    if open_it:
        webbrowser.open(link)
    return 0
