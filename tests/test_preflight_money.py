"""End to end, with the real claude CLI against the scripted model: the preflight's own cost is
the task's (its total, so ``max_usd`` counts it), an estimate over what the task has left asks
before it starts (Start anyway / Drop), and a held task that cannot start when the owner
presses Start anyway (the daily cap reached meanwhile) is told in one message."""

from __future__ import annotations

import json

import sqlalchemy as sa

from bot.store.schema import spend
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_approvals_e2e import answer_of, buttons

PREFLIGHT = "You are the preflight of an unattended coding agent"


def verdict(**fields: object) -> list[dict[str, object]]:
    return [{"text": json.dumps(fields)}]


async def spent_by_task(app, task_id: int) -> list[float]:
    async with app.store.engine.connect() as conn:
        query = sa.select(spend.c.cost_usd).where(spend.c.task_id == task_id)
        return [r[0] for r in await conn.execute(query.order_by(spend.c.id))]


async def test_the_preflights_cost_is_in_the_tasks_total(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(PREFLIGHT, verdict(verdict="go", estimate_usd=0.01))
    anthropic.script("MARK-COST", [{"text": "Costed."}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach max_usd=5 MARK-COST tidy the logs", OWNER)
            await fake.wait_text(OWNER, "Costed.", timeout_s=60)
            task = await app.store.tasks.get(1)
            rows = await spent_by_task(app, 1)
            assert len(rows) == 2 and rows[0] > 0, rows  # the preflight's, then the turn's
            assert abs(task.total_cost_usd - sum(rows)) < 1e-9, (task.total_cost_usd, rows)


async def test_an_estimate_over_the_budget_asks_first(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(PREFLIGHT, verdict(verdict="go", estimate_usd=3.0, estimate_minutes=20))
    anthropic.script("MARK-DEAR", [{"text": "Did the dear thing."}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach max_usd=1 MARK-DEAR rewrite the parser", OWNER)
            asked = await fake.wait_text(OWNER, "estimates this task at about $3.00", timeout_s=20)
            assert "more than the $1.00 it has left" in asked.params["text"]
            assert list(buttons(asked)) == ["▶️ Start anyway", "🗑 Drop"]
            assert await app.store.tasks.list_for(None) == []
            query = await fake.press(
                OWNER, asked.result["message_id"], buttons(asked)["🗑 Drop"], OWNER
            )
            assert await answer_of(fake, query) == "Dropped: not started"
            again = await fake.press(
                OWNER, asked.result["message_id"], buttons(asked)["▶️ Start anyway"], OWNER
            )
            assert await answer_of(fake, again) == "This question is closed."
            assert await app.store.tasks.list_for(None) == []

            mark = len(fake.calls)
            await fake.user_message("/detach max_usd=1 MARK-DEAR rewrite the parser", OWNER)
            asked = await fake.wait_text(OWNER, "estimates this task", timeout_s=20, after=mark)
            await fake.press(
                OWNER, asked.result["message_id"], buttons(asked)["▶️ Start anyway"], OWNER
            )
            ack = await fake.wait_text(OWNER, "mark-dear", timeout_s=20, after=mark)
            assert "Started anyway" in ack.params["text"]
            await fake.wait_text(OWNER, "Did the dear thing.", timeout_s=60, after=mark)


async def test_the_daily_cap_left_is_a_budget_too(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(PREFLIGHT, verdict(verdict="go", estimate_usd=0.8))
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, preflight=True, daily_cap_usd=1.0
        )
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await app.store.spend.record(OWNER, 0, 0, 0.5, 0, 0)  # earlier work today
            await fake.user_message("/detach MARK-CAP tidy the logs", OWNER)
            asked = await fake.wait_text(OWNER, "estimates this task at about $0.80", timeout_s=20)
            assert "more than the $0.50 it has left" in asked.params["text"]


async def test_a_held_task_the_cap_stops_is_told_to_its_owner(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    refuse = verdict(verdict="refuse", reason="It would drop the production table.")
    anthropic.script(PREFLIGHT, refuse)
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, preflight=True, daily_cap_usd=1.0
        )
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach MARK-CAPPED drop the table", OWNER)
            refusal = await fake.wait_text(OWNER, "Not started: It would drop", timeout_s=20)
            await app.store.spend.record(OWNER, 0, 0, 2.0, 0, 0)  # the cap is passed meanwhile
            query = await fake.press(
                OWNER, refusal.result["message_id"], buttons(refusal)["▶️ Start anyway"], OWNER
            )
            assert await answer_of(fake, query) == "Not started"
            told = await fake.wait_text(OWNER, "The held task did not start", timeout_s=20)
            assert "daily" in told.params["text"].lower(), told.params["text"]
            assert await app.store.tasks.list_for(None) == []
            assert anthropic.requests_for("MARK-CAPPED")[1:] == []  # no agent ran


async def test_a_question_whose_wait_ends_past_the_cap_is_told_not_started(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    ask = verdict(verdict="ask", question="Which table?", answers=["users"])
    anthropic.script(PREFLIGHT, ask)
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data",
            fake,
            claude_bin,
            workdir,
            preflight=True,
            daily_cap_usd=1.0,
            preflight_wait_s=2.0,
        )
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach MARK-EXPIRED tidy a table", OWNER)
            await fake.wait_text(OWNER, "Before this task starts: Which table?", timeout_s=20)
            await app.store.spend.record(OWNER, 0, 0, 2.0, 0, 0)  # the cap is passed meanwhile
            told = await fake.wait_text(OWNER, "The held task did not start", timeout_s=30)
            assert "daily" in told.params["text"].lower(), told.params["text"]
            assert await app.store.tasks.list_for(None) == []
