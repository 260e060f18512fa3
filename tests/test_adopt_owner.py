"""The machine's terminal sessions are its owner's (issue #51): ``/adopt`` by another allowed
user is refused before any session file is read — the reply holds nothing of the session, and
is the same for a session that exists and one that does not — while the owner's works. The
owner is DETACH_ADMINS, else the first of DETACH_ALLOWED_USERS as written."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError

from bot.settings import Settings
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot

OTHER = 222  # another allowed user
REFUSAL = "Only this machine's owner can adopt its terminal sessions"


async def _session(claude_bin: str, env: dict[str, str], cwd: Path, prompt: str) -> str:
    """A session the real CLI made at the terminal (``claude -p``)."""
    proc = await asyncio.create_subprocess_exec(
        claude_bin, "-p", prompt, "--output-format", "json",
        cwd=cwd, env={**env, "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    return str(json.loads(out)["session_id"])


async def test_another_allowed_user_cannot_adopt_the_owners_session(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script("MARK-OWNED", [{"text": "SECRET-LAST-ANSWER"}])
    session = await _session(claude_bin, agent_env, workdir, "MARK-OWNED PRIVATE-FIRST-PROMPT")
    async with FakeTelegram() as fake:
        users = f"{OWNER},{OTHER}"  # the owner is the first as written
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, allowed_users=users)
        async with running_bot(settings, agent_env) as app:
            replies = []
            for typed in (session, str(uuid.uuid4())):  # a real session, and none
                mark = len(fake.calls)
                await fake.user_message(f"/adopt {typed}", OTHER)
                replies.append(await fake.wait_text(OTHER, REFUSAL, after=mark))
            texts = [r.params["text"] for r in replies]
            assert texts[0] == texts[1]  # nothing says whether the session exists
            for secret in (session, "PRIVATE-FIRST-PROMPT", "SECRET-LAST-ANSWER", str(workdir)):
                assert secret not in json.dumps([c.params for c in fake.calls])
            assert await app.store.tasks.get(1) is None

            await fake.user_message(f"/adopt {session}", OWNER)
            await fake.wait_text(OWNER, "SECRET-LAST-ANSWER", timeout_s=20)
            task = await app.store.tasks.get(1)
            assert task is not None and task.owner_id == OWNER and task.session_id == session


def test_the_owner_is_detach_admins_else_the_first_allowed_user_as_written():
    assert Settings(_env_file=None, allowed_users="222, 111").owners == (222,)
    assert Settings(_env_file=None, allowed_users="111,222", admins="222").owners == (222,)
    assert Settings(_env_file=None, allowed_users=frozenset({222, 111})).owners == (111,)
    stranger = r"admins\s+Value error, 222 is not in DETACH_ALLOWED_USERS"
    with pytest.raises(ValidationError, match=stranger):
        Settings(_env_file=None, allowed_users="111", admins="222")
