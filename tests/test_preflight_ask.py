"""End to end, DETACH_PREFLIGHT=on, a preflight that asks or refuses: the question with its
answers as buttons, a tap or a reply in the owner's words reaching the agent's first prompt, a
refusal and "Start anyway", the wait's end, and a question that outlives a restart."""

from __future__ import annotations

import json

from tests.support.fake_telegram import Call, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_approvals_e2e import answer_of, buttons

PREFLIGHT = "You are the preflight of an unattended coding agent"
ASK = {"verdict": "ask", "question": "Which tests?", "answers": ["unit tests", "all tests"]}
QUESTION = "Before this task starts: Which tests?"


def agent_prompts(anthropic, marker: str) -> list[str]:
    return [
        r["first_user_text"]
        for r in anthropic.requests_for(marker)
        if PREFLIGHT not in r["first_user_text"]
    ]


async def asked(fake: FakeTelegram, text: str) -> Call:
    await fake.wait_call("setMyCommands")
    await fake.user_message(text, OWNER)
    return await fake.wait_text(OWNER, QUESTION, timeout_s=20)


async def test_a_tapped_answer_reaches_the_agent(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(PREFLIGHT, [{"text": json.dumps(ASK)}])
    anthropic.script("MARK-TAP", [{"text": "Fixed the unit tests."}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env) as app:
            question = await asked(fake, "/detach MARK-TAP fix the tests")
            choices = buttons(question)
            assert list(choices) == ["unit tests", "all tests", "▶️ Start anyway", "🗑 Drop"]
            assert await app.store.tasks.list_for(None) == []  # held, not started
            message_id = question.result["message_id"]
            query = await fake.press(OWNER, message_id, choices["unit tests"], OWNER)
            assert await answer_of(fake, query) == "Starting"
            ack = await fake.wait_text(OWNER, "#1 mark-tap", timeout_s=20)
            goal, clarified = ack.params["text"].split("\n")[1:3]  # each on its own line
            assert goal == "<i>MARK-TAP fix the tests</i>"
            assert clarified == "🛫 Clarified: Which tests? → unit tests"
            await fake.wait_text(OWNER, "Fixed the unit tests.", timeout_s=60)
            [prompt] = agent_prompts(anthropic, "MARK-TAP")
            assert "Clarified by the owner: Which tests? → unit tests" in prompt
            again = await fake.press(OWNER, message_id, choices["all tests"], OWNER)
            assert await answer_of(fake, again) == "This question is closed."
            assert len(await app.store.tasks.list_for(None)) == 1
            lines = await app.store.spend.by_model(OWNER, "2000-01-01")
            assert any("haiku" in str(line) for line in lines), lines


async def test_a_reply_in_the_owners_words_answers(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(PREFLIGHT, [{"text": json.dumps(ASK)}])
    anthropic.script("MARK-WORDS", [{"text": "Fixed test_x."}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env):
            question = await asked(fake, "MARK-WORDS fix the tests")  # plain text: a task
            await fake.user_message(
                "only test_x, it is flaky",
                OWNER,
                reply_to_message_id=question.result["message_id"],
            )
            await fake.wait_text(OWNER, "Fixed test_x.", timeout_s=60)
            [prompt] = agent_prompts(anthropic, "MARK-WORDS")
            assert "Which tests? → only test_x, it is flaky" in prompt


async def test_a_refusal_and_start_anyway(tmp_path, claude_bin, agent_env, anthropic, workdir):
    refuse = {"verdict": "refuse", "reason": "It would delete the whole repository."}
    anthropic.script(PREFLIGHT, [{"text": json.dumps(refuse)}])
    anthropic.script("MARK-RM", [{"text": "Removed."}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach MARK-RM delete everything", OWNER)
            refusal = await fake.wait_text(
                OWNER, "Not started: It would delete the whole repository.", timeout_s=20
            )
            assert list(buttons(refusal)) == ["▶️ Start anyway", "🗑 Drop"]
            assert await app.store.tasks.list_for(None) == []
            assert agent_prompts(anthropic, "MARK-RM") == []
            await fake.press(
                OWNER, refusal.result["message_id"], buttons(refusal)["▶️ Start anyway"], OWNER
            )
            ack = await fake.wait_text(OWNER, "#1 mark-rm", timeout_s=20)
            assert "Started anyway, against the preflight." in ack.params["text"]
            await fake.wait_text(OWNER, "Removed.", timeout_s=60)
            [prompt] = agent_prompts(anthropic, "MARK-RM")
            assert "Clarified" not in prompt


async def test_no_answer_starts_on_best_judgement(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(PREFLIGHT, [{"text": json.dumps(ASK)}])
    anthropic.script("MARK-WAIT", [{"text": "Did my best."}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, preflight=True, preflight_wait_s=1.0
        )
        async with running_bot(settings, agent_env):
            await asked(fake, "/detach MARK-WAIT fix the tests")
            ack = await fake.wait_text(OWNER, "#1 mark-wait", timeout_s=20)
            assert "got no answer: the agent uses its best judgement" in ack.params["text"]
            await fake.wait_text(OWNER, "Did my best.", timeout_s=60)
            [prompt] = agent_prompts(anthropic, "MARK-WAIT")
            assert "The owner was asked: Which tests?" in prompt
            assert "No answer: use your best judgement." in prompt


async def test_a_question_outlives_a_restart(tmp_path, claude_bin, agent_env, anthropic, workdir):
    anthropic.script(PREFLIGHT, [{"text": json.dumps(ASK)}])
    anthropic.script("MARK-AGAIN", [{"text": "Fixed all of them."}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env):
            question = await asked(fake, "/detach MARK-AGAIN fix the tests")
        mark = len(fake.calls)
        async with running_bot(settings, agent_env):
            await fake.wait_call("setMyCommands", after=mark)
            choices = buttons(question)
            await fake.press(OWNER, question.result["message_id"], choices["all tests"], OWNER)
            await fake.wait_text(OWNER, "Fixed all of them.", timeout_s=60, after=mark)
            [prompt] = agent_prompts(anthropic, "MARK-AGAIN")
            assert "Which tests? → all tests" in prompt
            assert len(anthropic.requests_for(PREFLIGHT)) == 1  # not asked again


async def test_a_refusal_follows_the_chats_notify_choice(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """The preflight's messages ask the /notify policy like a question: quiet, no buzz."""
    refuse = {"verdict": "refuse", "reason": "It would delete the whole repository."}
    anthropic.script(PREFLIGHT, [{"text": json.dumps(refuse)}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/notify quiet", OWNER)
            mark = len(fake.calls)
            await fake.user_message("/detach MARK-QUIET delete everything", OWNER)
            refusal = await fake.wait_text(OWNER, "Not started:", timeout_s=20, after=mark)
            assert str(refusal.params.get("disable_notification")).lower() == "true"
