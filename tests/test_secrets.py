"""Secrets the bot knows by their place rather than by their variable's name: the password
inside DETACH_DATABASE_URL, every preset's ``api_key_env``; and the files whose names say they
hold one (never recorded by a turn's baseline)."""

from __future__ import annotations

import json
from pathlib import Path

from bot.board.checkout import patch_since
from bot.errors import AgentCrashed
from bot.events import SessionStarted, TurnFinished, Usage
from bot.models import TaskStatus, TurnSpec
from bot.settings import Settings
from bot.turns.baseline import from_record, recorded, take
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import TOKEN, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_worktrees import make_repo, sh_git

SESSION = "0f0e0d0c-0b0a-4908-8706-050403020177"
API_KEY = "sk-ant-api03-secrets-test-value"


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


def leaking(*values: str):
    """An agent that says ``values`` in its answer, its error or its stderr (by the prompt)."""
    said = " and ".join(values)

    def script(spec: TurnSpec) -> tuple:
        if "crash" in spec.prompt:
            raise AgentCrashed("it fell over", 1, f"stderr: {said}")
        failed = "fail" in spec.prompt
        text = f"the keys: {said}"
        return (
            SessionStarted(SESSION, "fake-model"),
            TurnFinished(failed, text, SESSION, 0.01, Usage(input_tokens=1, output_tokens=1)),
        )

    return script


async def stored_and_shown(tmp_path: Path, environ: dict, *values: str, **overrides) -> list:
    """Three tasks whose agent says ``values`` (answer, error, stderr): each stored turn's and
    card's text."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    found = []
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir, **overrides)
        engine = FakeEngine(leaking(*values))
        async with running_bot(settings, environ, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            for n, (word, status) in enumerate(
                (("answer", TaskStatus.DONE), ("fail", TaskStatus.FAILED), ("crash", None)), 1
            ):
                await fake.user_message(f"/claude {word} now", OWNER)
                card = await fake.wait_text(OWNER, "[redacted]", after=len(fake.calls))
                (turn,) = await app.store.tasks.turns_of(n)
                assert status is None or turn.status is status
                found += [card.params["text"], turn.result_text, turn.stderr_tail]
                found.append(turn.error.encode() if turn.error else None)
    return found


async def test_an_answer_error_or_stderr_stores_and_shows_no_secret(tmp_path: Path):
    """The bot token and an API key of the environment, in the agent's answer, its error or
    its stderr: ``[redacted]`` in the stored turn and on the card."""
    environ = {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": API_KEY}
    found = await stored_and_shown(tmp_path, environ, TOKEN, API_KEY)
    text = json.dumps(found)
    assert TOKEN not in text and API_KEY not in text
    assert text.count("[redacted] and [redacted]") >= 6, found
