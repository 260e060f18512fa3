"""/audit end to end, through the real bot and the fake Bot API (agents replayed by the fake
engine, the check run by the real check runner): after an Always, a Deny, a budget Extend and a
check's consent it lists them, newest first, in English and in Russian; it pages with ‹ ›
buttons whose data is validated (a forged page is a stale button); another user's rows are never
shown; the board's task page carries the same lines."""

from __future__ import annotations

import re
import subprocess
from typing import Any

from bot.events import ApprovalRequest, SessionStarted, TurnFinished, Usage
from bot.models import TaskStatus
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import Call, FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot, wait_sent
from tests.test_approvals_e2e import answer_of, buttons, edited
from tests.test_board import bot_with_board, signed_in, wait_status
from tests.test_check_consent import CONSENT, MACHINE
from tests.test_checks import finished
from tests.test_handlers import feed, message
from tests.test_pending_copies import turn
from tests.test_phone import SESSION, answer

OTHER = 222  # a second allowed user
EXTEND = "0.01"  # what Extend adds to a 0.01 budget


def asks(command: str) -> tuple:
    request = ApprovalRequest("Bash", {"command": command}, "t1", f"Bash({command})")
    return (SessionStarted(SESSION, "fake-model"), request, *answer("asked and done")[1:])


def agent() -> FakeEngine:
    """Each task by its marker: asks to deploy, asks to delete, stops at its budget once (its
    next turn ends well)."""
    spends: list[int] = []

    def script(spec: Any) -> tuple:
        if "MARK-ALWAYS" in spec.prompt:
            return asks("make deploy")
        if "MARK-DENY" in spec.prompt:
            return asks("rm -rf build")
        if "MARK-CHECK" in spec.prompt:
            return finished("agent done")
        spends.append(1)
        return turn(0.006, "error_max_budget_usd") if len(spends) == 1 else turn(0.001, None)

    return FakeEngine(script)


def audit_lines(call: Call) -> list[str]:
    return call.params["text"].split("\n")[1:]


async def act(fake: FakeTelegram, workdir: Any) -> None:
    """An Always, a Deny, a budget Extend and a consent, in this order."""
    await fake.user_message("/claude MARK-ALWAYS deploy it", OWNER)
    ask = await fake.wait_text(OWNER, "make deploy")
    message_id = ask.result["message_id"]
    await fake.press(OWNER, message_id, buttons(ask)["♾ Always…"], OWNER)
    confirm = await edited(fake, message_id, "Always")
    await fake.press(OWNER, message_id, buttons(confirm)["✅ Always allow this"], OWNER)
    await fake.wait_text(OWNER, "asked and done")

    mark = len(fake.calls)
    await fake.user_message("/claude MARK-DENY clean it", OWNER)
    ask = await fake.wait_text(OWNER, "rm -rf build", after=mark)
    await fake.press(OWNER, ask.result["message_id"], buttons(ask)["⛔ Deny"], OWNER)
    await fake.wait_text(OWNER, "asked and done", after=mark)

    mark = len(fake.calls)
    await fake.user_message("/claude max_usd=0.01 MARK-SPEND spend it", OWNER)
    card = await fake.wait_text(OWNER, "budget reached", after=mark, timeout_s=20)
    extend = card.params["reply_markup"]["inline_keyboard"][0][0]["callback_data"]
    await answer_of(fake, await fake.press(OWNER, card.result["message_id"], extend, OWNER))
    await fake.wait_text(OWNER, "all wrapped up", after=mark, timeout_s=20)

    repo = workdir / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / ".detach.toml").write_text('check = "true"\n')
    mark = len(fake.calls)
    await fake.user_message("/claude mode=auto cwd=repo MARK-CHECK go", OWNER)
    ask = await fake.wait_text(OWNER, CONSENT, after=mark)
    await fake.press(OWNER, ask.result["message_id"], buttons(ask)["✅ Allow"], OWNER)
    await fake.wait_text(OWNER, "check passed", after=mark)


async def test_audit_lists_an_always_a_deny_an_extend_and_a_consent(tmp_path, workdir):
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, "claude", workdir, allowed_users=frozenset({OWNER, OTHER})
        )
        async with running_bot(settings, MACHINE, {"claude": agent()}) as app:
            await fake.wait_call("setMyCommands")
            await act(fake, workdir)
            await app.store.audit.record("approval", OTHER, None, "STRANGER: allow")

            mark = len(fake.calls)
            await fake.user_message("/audit", OWNER)
            shown = await fake.wait_text(OWNER, "<b>Audit</b>", after=mark)
            assert _ages_aside(audit_lines(shown)) == [
                "0s ago · <b>#4 mark-check-go</b> · repository check: allowed once",
                f"0s ago · <b>#3 mark-spend-spend</b> · budget extended by ${EXTEND}",
                "0s ago · <b>#2 mark-deny-clean</b> · Bash: denied",
                "0s ago · <b>#1 mark-always-deploy</b> · Bash: always allowed",
                "0s ago · <b>#1 mark-always-deploy</b> · remembered <code>Bash(make deploy)</code>",
            ]
            assert "reply_markup" not in shown.params  # one page: no buttons

            mark = len(fake.calls)
            await fake.user_message("/lang ru", OWNER)
            await fake.user_message("/audit", OWNER)
            russian = await fake.wait_text(OWNER, "<b>Журнал</b>", after=mark)
            said = russian.params["text"]
            for words in (
                "проверка репозитория: разрешено один раз",
                f"бюджет увеличен на ${EXTEND}",
                "Bash: запрещено",
                "Bash: разрешено всегда",
                "запомнено <code>Bash(make deploy)</code>",
            ):
                assert words in said, said
            assert "STRANGER" not in said and " ago" not in said

            mark = len(fake.calls)
            await fake.user_message("/audit", OTHER)
            theirs = await fake.wait_text(OTHER, "STRANGER", after=mark)
            assert "mark-" not in theirs.params["text"]  # the owner's rows: never another's


def _ages_aside(lines: list[str]) -> list[str]:
    """The lines with their ages read as "0s" (a slow machine may take a second or more)."""
    return [re.sub(r"^\d+[smh] ago", "0s ago", x) for x in lines]


async def test_audit_pages_newest_first_and_refuses_a_forged_page(tmp_path, workdir):
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        engine = FakeEngine(finished("agent done"))
        async with running_bot(settings, MACHINE, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            for n in range(13):
                await app.store.audit.record("grant_added", OWNER, None, f"Bash(step {n})")
            await app.store.audit.record("task_created", OWNER, None, "not an audit line")
            mark = len(fake.calls)
            await fake.user_message("/audit", OWNER)
            first = await fake.wait_text(OWNER, "page 1", after=mark)
            lines = audit_lines(first)
            assert len(lines) == 10 and "Bash(step 12)" in lines[0] and "step 3)" in lines[-1]
            assert list(buttons(first)) == ["Older ›"]
            message_id = first.result["message_id"]
            await fake.press(OWNER, message_id, buttons(first)["Older ›"], OWNER)
            older = await edited(fake, message_id, "page 2", after=mark)
            assert [x.split(" · ")[-1] for x in audit_lines(older)] == [
                f"remembered <code>Bash(step {n})</code>" for n in (2, 1, 0)
            ]
            assert list(buttons(older)) == ["‹ Newer"]
            await fake.press(OWNER, message_id, buttons(older)["‹ Newer"], OWNER)
            await edited(fake, message_id, "page 1", after=len(fake.calls) - 1)

            query = await fake.press(OWNER, message_id, "au:10001", OWNER)  # past MAX_PAGE
            assert await answer_of(fake, query) == "This button is no longer valid."
            query = await fake.press(OWNER, message_id, "au:-1", OWNER)
            assert await answer_of(fake, query) == "This button is no longer valid."


def asks_then_costs(cost_usd: float) -> tuple:
    return (
        SessionStarted(SESSION, "fake-model"),
        ApprovalRequest("Bash", {"command": "rm -rf build"}, "t1", "Bash(rm -rf build)"),
        TurnFinished(False, "after the approval", SESSION, cost_usd, Usage(1, 1)),
    )


async def test_the_boards_task_page_has_its_audit_and_writes_amounts_as_the_chat(tmp_path, workdir):
    """Deny on the board: the task page's audit says so (another user's page of it is not
    found); its cost reads "$0.002" there, as the completion card writes it."""
    engine = FakeEngine(asks_then_costs(0.002))
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        tg = await feed(app, message("/claude clean the build"))
        await wait_sent(tg, lambda c: "rm -rf build" in c.text, 10)
        http, csrf = await signed_in(app, board)
        async with http:
            async with http.get(f"{board.url}/api/tasks/1") as response:
                (pending,) = (await response.json())["pending"]
            body = {"qid": pending["id"], "answer": "deny"}
            url, headers = f"{board.url}/api/tasks/1/answer", {"X-CSRF-Token": csrf}
            async with http.post(url, json=body, headers=headers) as response:
                assert response.status == 200
            await wait_status(app, 1, TaskStatus.DONE)
            card = await wait_sent(tg, lambda c: "after the approval" in c.text, 10)
            async with http.get(f"{board.url}/api/tasks/1") as response:
                page = await response.json()
        assert [a["text"] for a in page["audit"]] == ["Bash: denied"]
        assert "· $0.002\n" in card.text  # the chat's amount
        assert page["task"]["cost_text"] == "$0.002"
        assert [t["cost_text"] for t in page["turns"]] == ["$0.002"]
