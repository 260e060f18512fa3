"""End to end: the real bot against the fake Bot API, the real claude CLI against the scripted
model, with DETACH_PREFLIGHT=on: which tasks get a preflight, what the acknowledgement says,
its cost in the task's spend, and a preflight that hangs or answers garbage never holding the
task longer than its timeout."""

from __future__ import annotations

import asyncio
import json
import time

from bot.preflight.call import TIMEOUT_S
from bot.preflight.message import ANYWAY
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, app_in_own_task, make_settings, running_bot
from tests.support.recording_session import RecordingSession
from tests.test_taskfiles import DROPPED

PREFLIGHT = "You are the preflight of an unattended coding agent"  # its prompt's first words


def go(**extra: object) -> list[dict[str, object]]:
    return [{"text": json.dumps({"verdict": "go", **extra})}]


async def test_go_is_acknowledged_and_its_cost_is_the_tasks(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(PREFLIGHT, go(estimate_usd=0.25, estimate_minutes=7, preset="opus"))
    anthropic.script("MARK-GO", [{"text": "Done going."}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/detach MARK-GO tidy the logs", OWNER)
            ack = await fake.wait_text(OWNER, "#1 mark-go", timeout_s=20)
            assert "Preflight: clear to go (about $0.25, 7 min)" in ack.params["text"]
            await fake.wait_text(OWNER, "Done going.", timeout_s=60)
            [checked] = anthropic.requests_for(PREFLIGHT)
            assert "MARK-GO tidy the logs" in checked["first_user_text"]
            assert "haiku" in str(checked["model"]) and checked["tools"] == []
            [agent] = anthropic.requests_for("MARK-GO tidy")[1:]
            assert PREFLIGHT not in agent["first_user_text"] and agent["tools"]
            lines = await app.store.spend.by_model(OWNER, "2000-01-01")
            assert any("haiku" in str(line) for line in lines), lines


async def test_sessions_and_preflight_no_get_none(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(PREFLIGHT, go())
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env):
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude MARK-SESSION hello", OWNER)
            await fake.wait_text(OWNER, "#1 mark-session", timeout_s=20)
            await fake.user_message("/detach preflight=no MARK-NOPRE hello", OWNER)
            ack = await fake.wait_text(OWNER, "#2 mark-nopre", timeout_s=20)
            assert "Preflight" not in ack.params["text"]
            await fake.wait_text(OWNER, "done", timeout_s=60)
            assert anthropic.requests_for(PREFLIGHT) == []


async def test_garbage_skips_the_preflight(tmp_path, claude_bin, agent_env, anthropic, workdir):
    anthropic.script(PREFLIGHT, [{"text": "Looks fine to me!"}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env):
            await fake.wait_call("setMyCommands")
            await fake.user_message("MARK-JUNK tidy the logs", OWNER)  # plain text: a task
            ack = await fake.wait_text(OWNER, "#1 mark-junk", timeout_s=20)
            assert (
                "Preflight skipped (its model's answer was not a verdict): started as usual."
                in (ack.params["text"])
            )
            await fake.wait_text(OWNER, "done", timeout_s=60)


async def test_a_hanging_preflight_holds_the_task_no_longer_than_its_timeout(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    anthropic.script(PREFLIGHT, [{"stall": 60}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir, preflight=True)
        async with running_bot(settings, agent_env):
            await fake.wait_call("setMyCommands")
            sent = time.monotonic()
            await fake.user_message("/detach MARK-HANG tidy the logs", OWNER)
            ack = await fake.wait_text(OWNER, "#1 mark-hang", timeout_s=TIMEOUT_S + 10)
            assert "Preflight skipped (no answer within 10 s)" in ack.params["text"]
            await fake.wait_text(OWNER, "done", timeout_s=60)
            [agent] = [
                r
                for r in anthropic.requests_for("MARK-HANG")
                if PREFLIGHT not in r["first_user_text"]
            ]
            assert agent["at"] - sent < TIMEOUT_S + 5, agent["at"] - sent


async def test_a_task_file_gets_its_preflight(tmp_path, claude_bin, agent_env, anthropic, workdir):
    anthropic.script(PREFLIGHT, go(estimate_usd=0.1, estimate_minutes=3))
    anthropic.script("MARK-INBOX", [{"text": "README tidied."}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, preflight=True, outbox_chat_interval_s=0
        )
        session = RecordingSession()
        async with app_in_own_task(settings, session=session, environ=agent_env) as app:
            (tmp_path / "data" / "inbox" / "tidy.md").write_text(DROPPED.format(chat=OWNER))
            await app.intake.poll_once()
            [checked] = anthropic.requests_for(PREFLIGHT)
            assert "MARK-INBOX Tidy the README." in checked["first_user_text"]
            assert await app.store.tasks.get(1) is not None
            lines = await app.store.spend.by_model(OWNER, "2000-01-01")
            assert any("haiku" in str(line) for line in lines), lines


async def test_a_task_file_over_its_budget_is_held_and_starts_anyway_with_its_file(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """Nobody is there when a task file is dropped: its estimate over the day's cap holds it as
    in the chat (the message says the estimate, the file waits in ``inbox/held/`` with the
    reason); "Start anyway" starts it, and its finished file is written back as any file's."""
    anthropic.script(PREFLIGHT, go(estimate_usd=0.8, estimate_minutes=3))
    anthropic.script("MARK-INBOX", [{"text": "README tidied."}])
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, preflight=True,
            outbox_chat_interval_s=0, daily_cap_usd=1.0,
        )  # fmt: skip
        session = RecordingSession()
        async with app_in_own_task(settings, session=session, environ=agent_env) as app:
            await app.store.spend.record(OWNER, 0, 0, 0.5, 0, 0)  # earlier work today
            inbox = tmp_path / "data" / "inbox"
            (inbox / "tidy.md").write_text(DROPPED.format(chat=OWNER))
            await app.intake.poll_once()
            assert await app.store.tasks.get(1) is None
            [hold] = await app.store.preflights.pending()
            [reason] = (inbox / "held").glob("*.reason.txt")
            assert "$0.80" in reason.read_text() and "Start anyway or Drop" in reason.read_text()
            assert await app.outbox.idle(20)
            said = "\n".join(session.texts())
            assert "estimates this task at about $0.80" in said, said
            assert "MARK-INBOX Tidy the README." in said  # which task it holds
            assert await app.uses.preflight.tap(OWNER, hold.id, ANYWAY) == "preflight.starting"
            assert (await app.store.tasks.get(1)).title.startswith("MARK-INBOX Tidy")
            async with asyncio.timeout(60):
                while not list((inbox / "done").glob("1-*.md")):
                    await app.intake.poll_once()
                    await asyncio.sleep(0.2)


async def test_engine_auto_routes_down_and_never_up(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, preflight_route_grace_s=0
        )  # preflight off: engine=auto asks for it
        async with running_bot(settings, agent_env):
            await fake.wait_call("setMyCommands")
            anthropic.script(PREFLIGHT, go(preset="haiku", engine="claude"))
            await fake.user_message("/detach engine=auto MARK-DOWN fix a typo", OWNER)
            ack = await fake.wait_text(OWNER, "#1 mark-down", timeout_s=20)
            assert "Routed by the preflight to haiku" in ack.params["text"]
            await fake.wait_text(OWNER, "done", timeout_s=60)
            [agent] = [
                r
                for r in anthropic.requests_for("MARK-DOWN")
                if PREFLIGHT not in r["first_user_text"]
            ]
            assert "haiku" in str(agent["model"])

            anthropic.script(PREFLIGHT, go(preset="opus", engine="claude"))
            mark = len(fake.calls)
            await fake.user_message("/detach engine=auto model=sonnet MARK-UP rewrite it", OWNER)
            ack = await fake.wait_text(OWNER, "#2 mark-up", timeout_s=20, after=mark)
            assert "Routed" not in ack.params["text"]
            await fake.wait_text(OWNER, "done", timeout_s=60, after=mark)
            [agent] = [
                r
                for r in anthropic.requests_for("MARK-UP")
                if PREFLIGHT not in r["first_user_text"]
            ]
            assert "sonnet" in str(agent["model"])
