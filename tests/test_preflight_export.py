"""A task a preflight's question held carries the question and the owner's answer as fields of
its task file (/export, the inbox's done/ file), the goal without the line the answer added;
a task file read back keeps them, and gives them to the agent."""

from __future__ import annotations

import json

from bot.tasks.export import export
from bot.tasks.taskfile import TaskFile, parse, render
from bot.telegram.texts import Texts
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_approvals_e2e import buttons
from tests.test_preflight_ask import ASK, PREFLIGHT, asked


async def test_export_carries_the_question_and_the_answer(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(PREFLIGHT, [{"text": json.dumps(ASK)}])
    anthropic.script("MARK-EXPORT", [{"text": "Fixed the unit tests."}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env) as app:
            question = await asked(fake, "/detach model=sonnet MARK-EXPORT fix the tests")
            choices = buttons(question)
            await fake.press(OWNER, question.result["message_id"], choices["unit tests"], OWNER)
            await fake.wait_text(OWNER, "Fixed the unit tests.", timeout_s=60)
            exported = parse(await export(app.store, 1, Texts()))
    assert exported.goal == "MARK-EXPORT fix the tests"
    assert (exported.question, exported.answer) == ("Which tests?", "unit tests")
    assert exported.result == "Fixed the unit tests."
    assert exported.prompt.endswith("Clarified by the owner: Which tests? → unit tests")


def test_a_task_file_read_back_keeps_the_question_and_its_answer():
    asked = TaskFile(goal="fix the tests", question="Which tests?", answer="only test_x\nit flakes")
    back = parse(render(asked))
    assert (back.question, back.answer) == ("Which tests?", "only test_x\nit flakes")
    unanswered = parse(render(TaskFile(goal="fix the tests", question="Which tests?")))
    assert (unanswered.question, unanswered.answer) == ("Which tests?", "")
    assert unanswered.prompt.endswith("No answer: use your best judgement.")
    plain = render(TaskFile(goal="fix the tests"))
    assert "# Question" not in plain and parse(plain).question == ""
