"""Secrets the bot knows by their place rather than by their variable's name: the password
inside DETACH_DATABASE_URL, every preset's ``api_key_env``; and the files whose names say they
hold one (never recorded by a turn's baseline)."""

from __future__ import annotations

import json
from pathlib import Path

from bot.board.checkout import patch_since
from bot.settings import Settings
from bot.turns.baseline import from_record, recorded, take
from tests.test_worktrees import make_repo, sh_git


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


SECRET_NAMED = (
    ".env",
    "app/.env.local",
    "certs/server.pem",
    "tls.KEY",
    "id_rsa_work",
    "store.p12",
    "store.pfx",
    "credentials.json",
    "config/my-secrets.yaml",
    ".netrc",
    ".npmrc",
    ".pypirc",
)


async def test_files_named_like_secrets_are_never_recorded(tmp_path: Path):
    """The owner's uncommitted files whose names say they hold a key: their content is never
    in the baseline's record, whatever it holds; the board diffs them from the commit."""
    repo = make_repo(tmp_path / "repo")
    (repo / "credentials.json").write_text('{"user": "me"}\n')
    sh_git(repo, "add", "credentials.json")
    sh_git(repo, "commit", "-q", "-m", "creds")
    for name in SECRET_NAMED:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(f"{name} holds canary-value-{len(name)}\n")
    (repo / "notes.md").write_text("the owner's notes\n")
    before = await take(str(repo))
    assert set(before.dirty) == {*SECRET_NAMED, "notes.md"}
    ((kind, body),) = await recorded(before, 1)
    assert set(body["texts"]) == {"notes.md"}
    assert "canary-value" not in json.dumps(body)
    # the task edits the owner's tracked credentials file further: diffed from the commit
    (repo / "credentials.json").write_text("credentials.json holds more\n")
    restored = from_record(body)
    assert restored is not None
    patch = await patch_since(str(repo), restored)
    assert patch is not None and "diff --git a/credentials.json b/credentials.json" in patch
    assert '-{"user": "me"}' in patch and "+credentials.json holds more" in patch
