"""Secrets the bot knows by their place rather than by their variable's name: the password
inside DETACH_DATABASE_URL, every preset's ``api_key_env``; and the files whose names say they
hold one (never recorded by a turn's baseline)."""

from __future__ import annotations

from bot.settings import Settings


def test_the_database_password_is_a_secret_value():
    settings = Settings(
        bot_token="123:bot-token-value",
        database_url="postgresql+asyncpg://detach:pa%40ss-w0rd-xyz@db.example:5432/detach",
    )
    values = settings.secret_values()
    assert "pa@ss-w0rd-xyz" in values and "pa%40ss-w0rd-xyz" in values
    assert "detach" not in values
    assert Settings(bot_token="123:x", database_url="sqlite:///x.db").secret_values() == ["123:x"]
    short = Settings(bot_token="123:x", database_url="postgresql://u:detach@h/db")
    assert short.secret_values() == ["123:x"]  # every HOME=/home/detach would go with it
