"""Secrets the bot knows by their place rather than by their variable's name: the password
inside DETACH_DATABASE_URL, every preset's ``api_key_env``; the names that only look secret
(git's identity, a ``*_ENV`` naming a variable); and the files whose names say they hold one
(never recorded by a turn's baseline)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bot.board.checkout import patch_since
from bot.errors import AgentCrashed
from bot.events import SessionStarted, TurnFinished, Usage
from bot.models import ApprovalMode, TaskStatus, TurnSpec
from bot.settings import Settings, key_variables, known_secrets
from bot.turns.baseline import from_record, recorded, take
from executors.check import ShellCheck
from executors.claude_sandbox import sandbox_settings
from executors.codex_sandbox import profile_config
from executors.denied import secret_names
from executors.gitguard import GitGuard
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import TOKEN, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_worktrees import make_repo, sh_git

SESSION = "0f0e0d0c-0b0a-4908-8706-050403020177"
API_KEY = "sk-ant-api03-secrets-test-value"

GIT = GitGuard()  # the bot's git, confined (nothing denied in these tests)


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


def test_git_identity_and_a_variables_name_are_no_secrets():
    """GIT_AUTHOR_NAME and a ``*_ENV`` holding a variable's name (DETACH_LOCAL_API_KEY_ENV)
    are neither redacted nor hidden; the variable it names is both, and so is a ``*_ENV``
    holding what is no variable's name."""
    key, token = "sk-or-v1-openrouter-value", "ghp_lowercase_Token_value"
    environ = {
        "GIT_AUTHOR_NAME": "Jane Q. Owner",
        "GIT_AUTHOR_EMAIL": "jane.owner@example.org",
        "GIT_COMMITTER_NAME": "Jane Q. Owner",
        "DETACH_LOCAL_API_KEY_ENV": "OPENROUTER_API_KEY",
        "OPENROUTER_API_KEY": key,
        "DEPLOY_TOKEN_ENV": token,  # a value, not a name: stays secret
        "TOTP_SECRET_ENV": "JBSWY3DPEHPK3PXP",  # all capitals, but no variable's name: secret
    }
    settings = Settings(bot_token="123:bot-token-value", local_api_key_env="OPENROUTER_API_KEY")
    keys = key_variables(settings, [])
    assert secret_names(environ, keys) == (
        "DEPLOY_TOKEN_ENV",
        "OPENROUTER_API_KEY",
        "TOTP_SECRET_ENV",
    )
    values = known_secrets(settings, environ, keys)
    assert key in values and token in values and "JBSWY3DPEHPK3PXP" in values
    assert not {"Jane Q. Owner", "jane.owner@example.org", "OPENROUTER_API_KEY"} & set(values)


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
    before = await take(GIT, str(repo))
    assert set(before.dirty) == {*SECRET_NAMED, "notes.md"}
    ((kind, body),) = await recorded(before, 1)
    assert set(body["texts"]) == {"notes.md"}
    assert "canary-value" not in json.dumps(body)
    # the task edits the owner's tracked credentials file further: diffed from the commit
    (repo / "credentials.json").write_text("credentials.json holds more\n")
    restored = from_record(body)
    assert restored is not None
    patch = await patch_since(GIT, str(repo), restored)
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


async def stored_and_shown(
    tmp_path: Path, environ: dict, *values: str, **overrides: object
) -> tuple[list, list[TurnSpec]]:
    """Three tasks whose agent says ``values`` (answer, error, stderr): each stored turn's and
    card's text; a fourth's check's output (``printenv``); and the specs the agent got."""
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
            await fake.user_message("/claude check=printenv answer again", OWNER)
            await fake.wait_text(OWNER, "[redacted]", after=len(fake.calls))
            check = await app.store.checks.last(4)
            assert check is not None and "PATH=" in check.output, check
            found.append(check.output)
    return found, engine.specs


async def test_an_answer_error_or_stderr_stores_and_shows_no_secret(tmp_path: Path):
    """The bot token and an API key of the environment, in the agent's answer, its error or
    its stderr: ``[redacted]`` in the stored turn and on the card."""
    environ = {"PATH": "/usr/bin:/bin", "ANTHROPIC_API_KEY": API_KEY}
    found, _ = await stored_and_shown(tmp_path, environ, TOKEN, API_KEY)
    text = json.dumps(found)
    assert TOKEN not in text and API_KEY not in text
    assert text.count("[redacted] and [redacted]") >= 6, found


async def test_a_presets_key_of_any_name_is_redacted_and_hidden_from_commands(tmp_path: Path):
    """A preset's ``api_key_env`` and DETACH_LOCAL_API_KEY_ENV named like no key (``GROQ``,
    ``LLM_PASS``): their values are redacted from what a turn stores and shows, and no
    sandboxed command of Claude, Codex or a check gets them."""
    config = tmp_path / "presets.toml"
    config.write_text(
        '[presets.groq]\nengine = "local"\nmodel = "llama"\n'
        'base_url = "http://127.0.0.1:9/v1"\napi_key_env = "GROQ"\n'
    )
    groq, local = "gsk-groq-value-0123456789", "llm-pass-value-9876543210"
    environ = {"PATH": "/usr/bin:/bin", "GROQ": groq, "LLM_PASS": local, "HOME": str(tmp_path)}
    found, specs = await stored_and_shown(
        tmp_path, environ, groq, local, config=config, local_api_key_env="LLM_PASS"
    )
    text = json.dumps(found)
    assert groq not in text and local not in text
    assert "GROQ=" not in found[-1] and "LLM_PASS=" not in found[-1]  # the check never had them
    assert text.count("[redacted] and [redacted]") >= 6, found
    spec = dataclasses.replace(specs[0], approval_mode=ApprovalMode.SANDBOX)
    assert {"GROQ", "LLM_PASS", "DETACH_STT_API_KEY"} <= set(spec.secret_names)
    claude = json.loads(sandbox_settings(spec, environ))["sandbox"]["credentials"]["envVars"]
    assert {v["name"] for v in claude} == {"GROQ", "LLM_PASS"}
    (excluded,) = [a for a in profile_config(spec, environ) if "exclude=" in a]
    assert '"GROQ"' in excluded and '"LLM_PASS"' in excluded
    check = ShellCheck(environ, [], 30, confine_always=False, hidden=spec.secret_names)
    result = await check.run("printenv", tmp_path, False, 1)
    assert "PATH=" in result.output and groq not in result.output
    assert local not in result.output
