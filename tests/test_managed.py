"""The remote route end to end: the real bot (long polling the fake Bot API) runs /managed
tasks on a scripted Managed Agents API on 127.0.0.1 (tests/support/managed_mock.py) through the
official anthropic SDK: the card shows the answer and its price, a reply continues the same
remote session, a cancel interrupts a running one, the key reaches nothing but the API."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from pydantic import SecretStr

from bot.models import ApprovalMode, TaskStatus
from executors import registry
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked
from tests.support.managed_mock import BETA, ManagedMock

REPO = "https://github.com/example-owner/example-repo"


def settings_for(tmp_path: Path, fake: FakeTelegram, claude_bin: str, workdir: Path, api):
    return make_settings(
        tmp_path / "data",
        fake,
        claude_bin,
        workdir,
        managed_api_key=api.api_key,
        managed_base_url=api.base_url,
    )


def with_remote(workdir: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workdir)], check=True, timeout=30)
    subprocess.run(
        ["git", "-C", str(workdir), "remote", "add", "origin", f"git@github.com:{REPO[19:]}.git"],
        check=True,
        timeout=30,
    )


async def test_a_remote_task_is_priced_and_a_reply_continues_its_session(
    tmp_path, claude_bin, agent_env, workdir, caplog
):
    caplog.set_level(logging.DEBUG)
    with_remote(workdir)
    async with ManagedMock() as api, FakeTelegram() as fake:
        api.script(
            "MARK-REMOTE",
            [
                [
                    {"tool": "bash", "input": {"command": "ls"}, "output": "README.md"},
                    {"text": "the repo has a README"},
                ],
                [{"text": "it was BLUE"}],
            ],
        )
        api.script("MARK-SECOND", [[{"text": "second done"}]])
        settings = settings_for(tmp_path, fake, claude_bin, workdir, api)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/managed MARK-REMOTE look at the repo", OWNER)
            ack = await fake.wait_text(OWNER, "Managed Agents", timeout_s=30)
            assert "GitHub repository" in ack.params["text"]
            card = await fake.wait_text(OWNER, "the repo has a README", timeout_s=30)
            # two model requests of 1000 in at $3/M and 100 out at $15/M (preset `cloud`)
            assert "$0.009" in card.params["text"]
            await fake.user_message(
                "which colour?", OWNER, reply_to_message_id=card.result["message_id"]
            )
            await fake.wait_text(OWNER, "it was BLUE", timeout_s=30)
            task = (await app.store.tasks.list_for(OWNER, None, 5))[0]
            await fake.user_message("/managed MARK-SECOND another task", OWNER)
            await fake.wait_text(OWNER, "second done", timeout_s=30)
            assert task.engine == "managed" and task.status is TaskStatus.DONE
            assert round(task.total_cost_usd, 6) == 0.0135
            lines = await app.store.transcript.after(task.id, 0, 100)
            calls = [x.body for x in lines if x.kind == "ToolCalled"]
            assert calls and calls[0]["name"] == "bash" and calls[0]["summary"] == "bash ls"
            said = repr([x.body for x in lines])
    session, second = api.sessions.values()  # the second task reused the kept agent
    assert session.body["resources"] == [{"type": "github_repository", "url": REPO}]
    messages = [e for e in api.sent_events(session.id) if e["type"] == "user.message"]
    assert [m["content"][0]["text"] for m in messages][1] == "which colour?"
    (agent,) = api.agents.values()
    assert agent["model"]["id"] == "claude-sonnet-4-6"
    assert len(api.environments) == 1 and len(api.requests_to("/v1/agents")) == 1
    assert all(r["headers"]["anthropic-beta"] == BETA for r in api.requests)
    assert api.api_key not in caplog.text and api.api_key not in said
    assert api.api_key.encode() not in _database_bytes(tmp_path / "data")


async def test_cancel_interrupts_the_running_remote_session(
    tmp_path, claude_bin, agent_env, workdir
):
    async with ManagedMock() as api, FakeTelegram() as fake:
        api.script(
            "MARK-LONG",
            [
                [{"text": "starting"}, {"wait": 120}, {"text": "never shown"}],
                [{"text": "resumed after the stop"}],
            ],
        )
        settings = settings_for(tmp_path, fake, claude_bin, workdir, api)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/managed MARK-LONG a long job", OWNER)
            ack = await fake.wait_text(OWNER, "mark-long", timeout_s=30)
            assert "without its files" in ack.params["text"]  # no GitHub remote here
            task_id = await wait_linked(app, OWNER, ack.result["message_id"])
            async with asyncio.timeout(30):
                while not api.sessions or next(iter(api.sessions.values())).status != "running":
                    await asyncio.sleep(0.05)
            (session,) = api.sessions.values()
            async with asyncio.timeout(30):
                while not any(e["type"] == "span.model_request_end" for e in session.events):
                    await asyncio.sleep(0.05)
            await fake.user_message(f"/cancel {task_id}", OWNER)
            await fake.wait_shown(OWNER, "cancelled", timeout_s=30)
            async with asyncio.timeout(15):
                while session.status != "idle":
                    await asyncio.sleep(0.05)
            task = await app.store.tasks.get(task_id)
            assert task is not None and task.status is TaskStatus.CANCELLED
            assert 0.0044 < task.total_cost_usd < 0.0046  # the one request before the stop
            sent = [e["type"] for e in api.sent_events(session.id)]
            assert sent == ["user.message", "user.interrupt"]
            # the session is kept, idle (not archived): a reply continues it
            mark = len(fake.calls)
            await fake.user_message(
                "go on, briefly", OWNER, reply_to_message_id=ack.result["message_id"]
            )
            await fake.wait_text(OWNER, "resumed after the stop", timeout_s=30, after=mark)
    assert not session.archived and len(api.sessions) == 1
    assert session.body["resources"] == []
    assert not any("never shown" in str(e) for e in session.events)


async def test_engine_option_and_cloud_preset_choose_the_remote_model_and_price(
    tmp_path, claude_bin, agent_env, workdir
):
    async with ManagedMock() as api, FakeTelegram() as fake:
        api.script("MARK-MAX", [[{"text": "done on opus"}]])
        settings = settings_for(tmp_path, fake, claude_bin, workdir, api)
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/detach engine=managed model=cloud-max MARK-MAX go", OWNER)
            card = await fake.wait_text(OWNER, "done on opus", timeout_s=30)
            sent = " ".join(str(m.get("text")) for m in fake.bot_messages(OWNER))
            assert "sandboxed" not in sent  # /detach's mode: no sandbox claimed for a remote run
            assert "$0.0075" in card.params["text"]  # 1000 in at $5/M, 100 out at $25/M
            task = (await app.store.tasks.list_for(OWNER, None, 5))[0]
            assert task.engine == "managed"
    (agent,) = api.agents.values()
    assert agent["model"]["id"] == "claude-opus-4-7"


@pytest.mark.parametrize(
    ("case", "key", "turn", "words"),
    [
        ("refused key", "sk-wrong-key-5521", None, "API refused: 401: invalid x-api-key"),
        (
            "stop reason",
            None,
            [{"text": "trying"}, {"stop": "retries_exhausted"}],
            "retries_exhausted",
        ),
        (
            "terminated",
            None,
            [{"text": "trying"}, {"error": "container lost"}, {"terminate": True}],
            "remote session ended: container lost",
        ),
    ],
)
async def test_a_remote_failure_fails_the_task_with_the_reason(
    tmp_path, claude_bin, agent_env, workdir, caplog, case, key, turn, words
):
    caplog.set_level(logging.DEBUG)
    async with ManagedMock() as api, FakeTelegram() as fake:
        api.script("MARK-FAIL", [turn or [{"text": "unused"}]])
        settings = settings_for(tmp_path, fake, claude_bin, workdir, api)
        if key:
            settings = settings.model_copy(update={"managed_api_key": SecretStr(key)})
        async with running_bot(settings, agent_env) as app:
            await fake.user_message("/managed MARK-FAIL do it", OWNER)
            card = await fake.wait_shown(OWNER, words, timeout_s=30)
            task = (await app.store.tasks.list_for(OWNER, None, 5))[0]
            assert task.status is TaskStatus.FAILED, card.params["text"]
    sent = key or api.api_key
    assert sent not in caplog.text and sent not in card.params["text"]


async def test_the_scripted_api_refuses_what_the_published_one_refuses():
    async with ManagedMock() as api, aiohttp.ClientSession() as http:
        url = f"{api.base_url}/v1/agents"
        body = {"name": "x", "model": "claude-sonnet-4-6"}
        async with http.post(url, json=body, headers={"x-api-key": api.api_key}) as no_beta:
            assert no_beta.status == 400
        async with http.post(url, json=body, headers={"anthropic-beta": BETA}) as no_key:
            assert no_key.status == 401


async def test_off_without_its_key_and_never_a_routing_target(
    tmp_path, claude_bin, agent_env, workdir
):
    assert not any(
        registry.may_move(mode, engine, "managed")
        for mode in ApprovalMode
        for engine in ("claude", "codex", "local")
    )
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        async with running_bot(settings, agent_env):
            await fake.user_message("/status", OWNER)
            await fake.wait_text(OWNER, "managed: off", timeout_s=30)


def _database_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in data_dir.rglob("*") if p.is_file())


pytestmark = pytest.mark.timeout(120)


def test_the_sdk_is_imported_on_the_first_remote_turn_not_at_start_up():
    probe = "import sys, bot.app, bot.cli, bot.worker; print('anthropic' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "False"
