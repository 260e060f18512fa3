"""End to end, ``engine=auto`` across engines: the real claude CLI's preflight (against the
scripted Anthropic server) moves a small task to a /local preset (against the scripted Chat
Completions server) when one is configured and priced, and never to an unpriced one, which the
money desk counts at its engine's dearest price."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest

from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_approvals_e2e import answer_of, buttons

PREFLIGHT = "You are the preflight of an unattended coding agent"


@pytest.fixture
def chat() -> object:
    mock = ChatMock().start()
    yield mock
    mock.stop()


def config(tmp_path: Path, chat: ChatMock, priced: bool) -> Path:
    path = tmp_path / "detach.toml"
    prices = "price_input = 0\nprice_output = 0\n" if priced else ""
    path.write_text(
        "[presets.box]\n"
        'engine = "local"\n'
        'model = "mock-model"\n'
        f'base_url = "{chat.base_url}"\n' + prices
    )
    return path


def go_to_box() -> list[dict[str, object]]:
    return [{"text": json.dumps({"verdict": "go", "engine": "local", "preset": "box"})}]


async def test_engine_auto_routes_a_small_task_to_a_free_local_preset(
    tmp_path, claude_bin, agent_env, anthropic, workdir, chat
):
    anthropic.script(PREFLIGHT, go_to_box())
    chat.script("MARK-LOCAL", [{"text": "Fixed locally."}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            config=config(tmp_path, chat, True),
            preflight_route_grace_s=0,
        )
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach engine=auto MARK-LOCAL fix a typo", OWNER)
            ack = await fake.wait_text(OWNER, "#1 mark-local", timeout_s=20)
            assert "Routed by the preflight to box (local) instead of claude" in ack.params["text"]
            await fake.wait_text(OWNER, "Fixed locally.", timeout_s=60)
            [checked] = anthropic.requests_for(PREFLIGHT)
            assert "engine local, preset box: USD 0 in / 0 out" in checked["first_user_text"]
            assert anthropic.requests_for("MARK-LOCAL")[1:] == []  # no Claude agent turn
            [request] = chat.requests_for("MARK-LOCAL")
            assert request["model"] == "mock-model"
            task = await app.store.tasks.get(1)
            assert task.engine == "local" and task.preset == "box"
            planned = "sandbox" if shutil.which("bwrap") else "ask"  # /detach's, as planned here
            assert task.approval_mode.value == planned  # the same rights, never wider


async def test_an_unpriced_local_preset_is_never_a_target(
    tmp_path, claude_bin, agent_env, anthropic, workdir, chat
):
    anthropic.script(PREFLIGHT, go_to_box())
    anthropic.script("MARK-STAY", [{"text": "Stayed on Claude."}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, config=config(tmp_path, chat, False)
        )
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach engine=auto MARK-STAY fix a typo", OWNER)
            ack = await fake.wait_text(OWNER, "#1 mark-stay", timeout_s=20)
            assert "Routed" not in ack.params["text"]
            await fake.wait_text(OWNER, "Stayed on Claude.", timeout_s=60)
            assert chat.requests_for("MARK-STAY") == []
            assert (await app.store.tasks.get(1)).engine == "claude"


async def test_default_engine_auto_routes_without_the_option_and_a_named_model_stays(
    tmp_path, claude_bin, agent_env, anthropic, workdir, chat
):
    anthropic.script(PREFLIGHT, go_to_box())
    chat.script("MARK-DEFAULT", [{"text": "Routed by default."}])
    anthropic.script("MARK-NAMED", [{"text": "Stayed on sonnet."}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            config=config(tmp_path, chat, True),
            default_engine="auto",
            preflight_route_grace_s=0,
        )
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("MARK-DEFAULT fix a typo", OWNER)  # plain text: a task
            ack = await fake.wait_text(OWNER, "#1 mark-default", timeout_s=20)
            assert "Routed by the preflight to box (local)" in ack.params["text"]
            await fake.wait_text(OWNER, "Routed by default.", timeout_s=60)
            await fake.user_message("/detach model=sonnet MARK-NAMED fix a typo", OWNER)
            await fake.wait_text(OWNER, "Stayed on sonnet.", timeout_s=60)
            assert (await app.store.tasks.get(2)).preset == "sonnet"
            assert len(anthropic.requests_for(PREFLIGHT)) == 1  # a named model: no routing


async def test_run_on_the_default_instead_moves_it_back_before_it_starts_and_not_after(
    tmp_path, claude_bin, agent_env, anthropic, workdir, chat
):
    anthropic.script(PREFLIGHT, go_to_box())
    anthropic.script("MARK-BACK", [{"text": "Done on Claude."}])
    chat.script("MARK-LATE", [{"text": "Done on the box."}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            config=config(tmp_path, chat, True),
            preflight_route_grace_s=3,
        )
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach engine=auto MARK-BACK fix a typo", OWNER)
            ack = await fake.wait_text(OWNER, "#1 mark-back", timeout_s=20)
            offered = await fake.wait_call(
                "editMessageReplyMarkup",
                lambda c: int(c.params["message_id"]) == ack.result["message_id"],
                timeout_s=20,
            )
            back = buttons(offered)["↩️ Run on claude instead"]
            query = await fake.press(OWNER, ack.result["message_id"], back, OWNER)
            assert await answer_of(fake, query) == "Moved back"
            edited = await fake.wait_call(
                "editMessageText", lambda c: "Moved back to claude by you" in c.params["text"]
            )
            assert "Routed" not in edited.params["text"]
            assert list(buttons(edited)) == ["Cancel"]
            await fake.wait_text(OWNER, "Done on Claude.", timeout_s=60)
            assert chat.requests_for("MARK-BACK") == []
            assert (await app.store.tasks.get(1)).engine == "claude"

            mark = len(fake.calls)
            await fake.user_message("/detach engine=auto MARK-LATE fix a typo", OWNER)
            ack = await fake.wait_text(OWNER, "#2 mark-late", timeout_s=20, after=mark)
            offered = await fake.wait_call(
                "editMessageReplyMarkup",
                lambda c: int(c.params["message_id"]) == ack.result["message_id"],
                timeout_s=20,
                after=mark,
            )
            await fake.wait_text(OWNER, "Done on the box.", timeout_s=60, after=mark)
            back = buttons(offered)["↩️ Run on claude instead"]
            query = await fake.press(OWNER, ack.result["message_id"], back, OWNER)
            assert (await answer_of(fake, query)).startswith("Already started")
            assert (await app.store.tasks.get(2)).engine == "local"


async def test_a_routed_task_is_claimable_only_once_its_grace_ends_even_after_a_restart(
    tmp_path, claude_bin, agent_env, anthropic, workdir, chat
):
    """While "Run on <default> instead" may still move it, the routed task's first turn is
    unsubmitted: a runner of a shared queue cannot claim it. When the grace ends it starts;
    a restart during the grace starts it too (nothing is stranded)."""
    anthropic.script(PREFLIGHT, go_to_box())
    chat.script("MARK-HELD", [{"text": "Held, then done."}])
    chat.script("MARK-AGAIN", [{"text": "Done after the restart."}])
    runner = "w1@h#grace"
    async with FakeTelegram() as fake:

        def settings(grace_s: float) -> object:
            return make_settings(
                tmp_path / "data",
                fake,
                claude_bin,
                workdir,
                config=config(tmp_path, chat, True),
                preflight_route_grace_s=grace_s,
            )

        async with running_bot(settings(3), agent_env) as app:
            await fake.wait_call("setMyCommands")
            await app.store.runners.register(runner, "w1", "h", "worker", 60)
            await fake.user_message("/detach engine=auto MARK-HELD fix a typo", OWNER)
            await fake.wait_text(OWNER, "#1 mark-held", timeout_s=20)
            # the intake polls every 0.2 s: several passes within the grace
            for _ in range(5):
                assert await app.store.claims.claim_next(runner, ["local", "claude"]) is None
                assert (await app.store.tasks.last_turn(1)).status.value == "queued"
                await asyncio.sleep(0.2)
            await fake.wait_text(OWNER, "Held, then done.", timeout_s=30)

        mark = len(fake.calls)
        async with running_bot(settings(600), agent_env) as app:
            await fake.wait_call("setMyCommands", after=mark)
            await fake.user_message("/detach engine=auto MARK-AGAIN fix a typo", OWNER)
            await fake.wait_text(OWNER, "#2 mark-again", timeout_s=20, after=mark)
            assert await app.store.claims.claim_next(runner, ["local", "claude"]) is None
        mark = len(fake.calls)
        async with running_bot(settings(600), agent_env) as app:  # restarted in the grace
            await fake.wait_text(OWNER, "Done after the restart.", timeout_s=30, after=mark)
            assert (await app.store.tasks.get(2)).engine == "local"
