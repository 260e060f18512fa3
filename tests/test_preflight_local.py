"""End to end, DETACH_PREFLIGHT_MODEL naming a /local preset: the preflight is one Chat
Completions call to its endpoint (the scripted server), its verdict read as from Claude, its
tokens priced by the preset and counted as the task's; an endpoint that hangs never holds the
task longer than the timeout."""

from __future__ import annotations

import json
import time

import pytest

from bot.preflight.call import TIMEOUT_S
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_preflight_money import spent_by_task

PREFLIGHT = "You are the preflight of an unattended coding agent"


@pytest.fixture
def chat() -> object:
    mock = ChatMock().start()
    yield mock
    mock.stop()


def settings_for(tmp_path, fake, claude_bin, workdir, chat):
    config = tmp_path / "detach.toml"
    config.write_text(
        "[presets.judge]\n"
        'engine = "local"\n'
        'model = "mock-model"\n'
        f'base_url = "{chat.base_url}"\n'
        "price_input = 1.0\nprice_output = 2.0\n"
    )
    return make_settings(
        tmp_path / "data",
        fake,
        claude_bin,
        workdir,
        config=config,
        preflight=True,
        preflight_model="judge",
    )


async def test_a_local_preset_answers_the_preflight_and_its_cost_is_the_tasks(
    tmp_path, claude_bin, agent_env, anthropic, workdir, chat
):
    go = {"verdict": "go", "estimate_usd": 0.2, "estimate_minutes": 4}
    chat.script(PREFLIGHT, [{"text": json.dumps(go)}])
    anthropic.script("MARK-JUDGED", [{"text": "Judged and done."}])
    async with FakeTelegram() as fake:
        settings = settings_for(tmp_path, fake, claude_bin, workdir, chat)
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach MARK-JUDGED tidy the logs", OWNER)
            ack = await fake.wait_text(OWNER, "#1 mark-judged", timeout_s=20)
            assert "Preflight: clear to go (about $0.20, 4 min)" in ack.params["text"]
            await fake.wait_text(OWNER, "Judged and done.", timeout_s=60)
            [asked] = chat.requests_for(PREFLIGHT)
            assert "MARK-JUDGED tidy the logs" in asked["first_user_text"]
            assert asked["model"] == "mock-model" and asked["tools"] == []
            assert anthropic.requests_for(PREFLIGHT) == []  # not through Claude
            # 1000 tokens in at $1/M + 100 out at $2/M: $0.0012, the task's first spend
            rows = await spent_by_task(app, 1)
            assert abs(rows[0] - 0.0012) < 1e-9, rows
            assert abs((await app.store.tasks.get(1)).total_cost_usd - sum(rows)) < 1e-9
    assert len(chat.requests_for(PREFLIGHT)) == 1


async def test_a_hanging_local_preflight_is_skipped_within_its_timeout(
    tmp_path, claude_bin, agent_env, anthropic, workdir, chat
):
    chat.script(PREFLIGHT, [{"delay": 25, "text": "{}"}])
    async with FakeTelegram() as fake:
        async with running_bot(settings_for(tmp_path, fake, claude_bin, workdir, chat), agent_env):
            await fake.wait_call("setMyCommands")
            sent = time.monotonic()
            await fake.user_message("/detach MARK-SLOW tidy the logs", OWNER)
            ack = await fake.wait_text(OWNER, "#1 mark-slow", timeout_s=TIMEOUT_S + 10)
            assert "Preflight skipped (no answer within 10 s)" in ack.params["text"]
            assert time.monotonic() - sent < TIMEOUT_S + 5
            await fake.wait_text(OWNER, "done", timeout_s=60)
