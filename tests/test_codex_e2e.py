"""/codex end to end: the real bot over HTTP, the real codex app-server, approvals as buttons."""

from __future__ import annotations

from bot.models import TaskStatus
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_linked
from tests.test_approvals_e2e import answer_of, buttons


async def test_codex_task_with_an_approval_and_a_resumed_turn(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, openai, workdir
):
    openai.script(
        "MARK-CX", [{"shell": "touch from-codex.txt"}, {"text": "Codex did it."}, {"echo": True}]
    )
    env = {**agent_env, **codex_env}
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin)
        async with running_bot(settings, env) as app:
            await fake.user_message("/status", OWNER)
            status = await fake.wait_text(OWNER, "Engines")
            assert (
                "codex 0.171.0" in status.params["text"]
                and "claude 2.1.197" in status.params["text"]
            )
            # an engine that is merely not configured says so, not "not installed"
            assert "local: off (DETACH_LOCAL_BASE_URL" in status.params["text"]
            await fake.user_message("/codex MARK-CX make a file", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
            assert "touch from-codex.txt" in ask.params["text"]
            q = await fake.press(OWNER, ask.result["message_id"], buttons(ask)["✅ Allow"], OWNER)
            assert await answer_of(fake, q) == "Allowed."
            done = await fake.wait_text(OWNER, "Codex did it.", timeout_s=60)
            task = await app.store.tasks.get(1)
            assert task.engine == "codex" and task.session_id
            turn = await app.store.tasks.last_turn(1)
            assert turn.input_tokens == 200 and turn.output_tokens == 20  # two model requests
            await wait_linked(app, OWNER, done.result["message_id"])
            mark = len(fake.calls)
            await fake.user_message(
                "and now?", OWNER, reply_to_message_id=done.result["message_id"]
            )
            again = await fake.wait_text(OWNER, "ECHO", timeout_s=60, after=mark)
            assert "and now?" in again.params["text"]
            assert (await app.store.tasks.get(1)).status is TaskStatus.DONE
    assert (workdir / "from-codex.txt").exists()


async def test_detach_on_codex_and_a_failed_model(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, openai, workdir
):
    openai.script("MARK-CXFAIL", [{"http_error": 500}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin)
        async with running_bot(settings, {**agent_env, **codex_env}) as app:
            await fake.user_message("/detach engine=codex MARK-CXFAIL go", OWNER)
            failed = await fake.wait_text(OWNER, "failed", timeout_s=60)
            assert "#1" in failed.params["text"]
            task = await app.store.tasks.get(1)
            assert task.engine == "codex" and task.status is TaskStatus.FAILED


async def test_codex_always_is_remembered_for_later_turns(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, openai, workdir
):
    openai.script(
        "MARK-CXA",
        [
            {"shell": "touch again.txt"},
            {"text": "first done"},
            {"shell": "touch again.txt"},
            {"text": "second done"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin)
        async with running_bot(settings, {**agent_env, **codex_env}) as app:
            await fake.user_message("/codex MARK-CXA go", OWNER)
            ask = await fake.wait_text(OWNER, "wants to use", timeout_s=60)
            await fake.press(OWNER, ask.result["message_id"], buttons(ask)["♾ Always…"], OWNER)
            confirm = await fake.wait_call(
                "editMessageText", lambda c: "Bash(touch again.txt)" in c.params["text"]
            )
            await fake.press(
                OWNER, ask.result["message_id"], buttons(confirm)["✅ Always allow this"], OWNER
            )
            first = await fake.wait_text(OWNER, "first done", timeout_s=60)
            await wait_linked(app, OWNER, first.result["message_id"])
            mark = len(fake.calls)
            await fake.user_message("again", OWNER, reply_to_message_id=first.result["message_id"])
            await fake.wait_text(OWNER, "second done", timeout_s=60, after=mark)
            assert not [
                c
                for c in fake.calls[mark:]
                if c.method == "sendMessage" and "wants to use" in c.params["text"]
            ]
            (grant,) = await app.store.grants.active(OWNER, "codex")
            assert grant.pattern == "Bash(touch again.txt)"


async def test_codex_is_priced_from_its_preset_and_stopped_at_its_budget(
    tmp_path, claude_bin, codex_bin, agent_env, codex_env, openai, workdir
):
    from tests.test_codex_executor import _procs

    openai.script("MARK-CXBUD", [{"shell": "sleep 43.25"}, {"text": "never"}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, codex_bin=codex_bin)
        async with running_bot(settings, {**agent_env, **codex_env}) as app:
            await fake.user_message(
                "/codex model=gpt-5.5 max_usd=0.0001 mode=auto MARK-CXBUD go", OWNER
            )
            await fake.wait_text(OWNER, "budget reached", timeout_s=60)
            await fake.wait_text(OWNER, "stopped at its budget", timeout_s=30)
            task = await app.store.tasks.get(1)
            assert task.status is TaskStatus.BUDGET_EXCEEDED
            # 100 input + 10 output tokens at $1.25 / $10 per million
            assert abs(task.total_cost_usd - 0.000225) < 1e-9
    assert _procs("sleep 43.25") == []
