"""A repository's check needs the owner's consent, end to end: the real bot against the fake
Bot API, an agent that finishes at once (it does not matter here) and the real check runner. A
cloned repository's ``.detach.toml`` check is an approval message holding the whole (long,
padded) command; no tap runs nothing; Allow runs it in the sandbox; Always lets later tasks in
that repository run it without asking until the command changes or /grants revokes it; a check
the owner typed runs without asking; every mode's check runs sandboxed."""

from __future__ import annotations

import html
import subprocess
import uuid
from pathlib import Path

from bot.models import TaskStatus
from executors import sandbox
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_approvals_e2e import answer_of, buttons, edited
from tests.test_checks import finished, until_status

CONSENT = "asks, in its"  # the approval message's words (check.consent)
MACHINE = {"PATH": "/usr/local/bin:/usr/bin:/bin"}  # the agents' (and checks') environment


def test_this_machine_has_the_sandbox():
    assert sandbox.problem(MACHINE) is None


def cloned(path: Path, check: str) -> None:
    """A repository as a stranger made it, with its check in ``.detach.toml``."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    toml_string = check.replace("\\", "\\\\").replace('"', '\\"')
    (path / ".detach.toml").write_text(f'check = "{toml_string}"\n')


def outside() -> Path:
    """A path the bot's user could write (root), but a sandboxed check cannot."""
    return Path(f"/var/tmp/check-consent-{uuid.uuid4().hex[:10]}")


def escaped(command: str) -> str:
    return html.escape(command, quote=False)


async def test_no_tap_is_a_no_and_the_card_says_the_check_did_not_run(tmp_path, workdir):
    marker = tmp_path / "PAYLOAD-RAN"
    command = "true" + " " * 300 + f"&& echo '<x>' && touch {marker}"  # padding hides a payload
    cloned(workdir, command)
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir, approval_timeout_s=2)
        engine = FakeEngine(finished("agent done"))
        async with running_bot(settings, MACHINE, executors={"claude": engine}) as app:
            await fake.user_message("/claude mode=auto MARK-NOTAP go", OWNER)
            ack = await fake.wait_text(OWNER, "#1 mark-notap")
            assert escaped(command) in ack.params["text"]  # the whole command, escaped
            ask = await fake.wait_text(OWNER, CONSENT)
            assert escaped(command) in ask.params["text"] and str(workdir) in ask.params["text"]
            assert set(buttons(ask)) == {"✅ Allow", "⛔ Deny", "♾ Always…"}
            await edited(fake, ask.result["message_id"], "Expired")
            card = await fake.wait_text(OWNER, "check not run")
            assert "agent done" in card.params["text"]
            task = await until_status(app, 1, TaskStatus.DONE)
            assert task.check == command and task.check_repository == str(workdir)
            check = await app.store.checks.last(1)
            assert not check.approved and not check.passed
            assert len(engine.specs) == 1  # not a failure fed back to the agent
    assert not marker.exists()


async def test_allow_runs_it_in_the_sandbox(tmp_path, workdir):
    escape = outside()
    cloned(workdir, f"echo in > inside.txt; touch {escape}; echo rc=$?")
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        engine = FakeEngine(finished("agent done"))
        async with running_bot(settings, MACHINE, executors={"claude": engine}) as app:
            await fake.user_message("/claude mode=auto MARK-ALLOW go", OWNER)
            ask = await fake.wait_text(OWNER, CONSENT)
            q = await fake.press(OWNER, ask.result["message_id"], buttons(ask)["✅ Allow"], OWNER)
            assert await answer_of(fake, q) == "Allowed."
            await fake.wait_text(OWNER, "check passed")
            check = await app.store.checks.last(1)
            assert check.approved and "rc=1" in check.output and "Read-only" in check.output
            assert await app.store.grants.active(OWNER) == []  # once: nothing remembered
    assert (workdir / "inside.txt").read_text() == "in\n"
    assert not escape.exists()


async def test_always_is_remembered_per_command_until_revoked(tmp_path, workdir):
    cloned(workdir, "echo FIRST")
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        engine = FakeEngine(finished("agent done"))
        async with running_bot(settings, MACHINE, executors={"claude": engine}) as app:
            await fake.user_message("/claude MARK-ONE go", OWNER)
            ask = await fake.wait_text(OWNER, CONSENT)
            msg_id = ask.result["message_id"]
            q = await fake.press(OWNER, msg_id, buttons(ask)["♾ Always…"], OWNER)
            assert "Check the rule" in await answer_of(fake, q)
            confirm = await edited(fake, msg_id, "Always run exactly this check")
            await fake.press(OWNER, msg_id, buttons(confirm)["✅ Always allow this"], OWNER)
            await fake.wait_text(OWNER, "check passed")
            (grant,) = await app.store.grants.active(OWNER)
            assert grant.engine == "check" and grant.cwd == str(workdir)
            assert "echo FIRST" in grant.pattern

            mark = len(fake.calls)
            await fake.user_message("/claude MARK-TWO go", OWNER)  # same repository, same file
            await fake.wait_text(OWNER, "check passed", after=mark)
            assert not _asked(fake, mark)

            (workdir / ".detach.toml").write_text('check = "echo SECOND"\n')  # changed: asks
            mark = len(fake.calls)
            await fake.user_message("/claude MARK-THREE go", OWNER)
            ask = await fake.wait_text(OWNER, CONSENT, after=mark)
            assert "echo SECOND" in ask.params["text"]
            await fake.press(OWNER, ask.result["message_id"], buttons(ask)["⛔ Deny"], OWNER)
            await fake.wait_text(OWNER, "check not run", after=mark)

            (workdir / ".detach.toml").write_text('check = "echo FIRST"\n')
            mark = len(fake.calls)
            await fake.user_message("/grants", OWNER)
            listing = await fake.wait_text(OWNER, "Remembered approvals", after=mark)
            assert "echo FIRST" in listing.params["text"] and str(workdir) in listing.params["text"]
            q = await fake.press(
                OWNER, listing.result["message_id"], buttons(listing)["Revoke 1"], OWNER
            )
            assert "Revoked" in await answer_of(fake, q)
            assert await app.store.grants.active(OWNER) == []
            mark = len(fake.calls)
            await fake.user_message("/claude MARK-FOUR go", OWNER)  # revoked: asks again
            await fake.wait_text(OWNER, CONSENT, after=mark)
            await until_status(app, 4, TaskStatus.RUNNING)


async def test_a_check_the_owner_typed_runs_without_asking_sandboxed_in_every_mode(
    tmp_path, workdir
):
    cloned(workdir, "touch SHOULD-NOT-RUN")
    escapes = {mode: outside() for mode in ("ask", "auto", "readonly")}
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        engine = FakeEngine(finished("agent done"))
        async with running_bot(settings, MACHINE, executors={"claude": engine}) as app:
            for n, (mode, escape) in enumerate(escapes.items(), start=1):
                check = f'check="echo {mode} > {mode}.txt; touch {escape}; echo rc=$?"'
                await fake.user_message(f"/claude mode={mode} {check} MARK-{mode} go", OWNER)
                await until_status(app, n, TaskStatus.DONE)
                result = await app.store.checks.last(n)
                assert result.approved and result.passed and "rc=1" in result.output
            assert not _asked(fake, 0)
    for mode, escape in escapes.items():
        assert (workdir / f"{mode}.txt").read_text() == f"{mode}\n"
        assert not escape.exists()
    assert not (workdir / "SHOULD-NOT-RUN").exists()


def _asked(fake: FakeTelegram, after: int) -> bool:
    return any(
        c.method == "sendMessage" and CONSENT in c.params.get("text", "")
        for c in fake.calls[after:]
    )


async def test_a_check_too_long_to_show_whole_is_refused(tmp_path, workdir):
    cloned(workdir, "true" + " " * 1990 + "; touch PAYLOAD")
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, "claude", workdir)
        engine = FakeEngine(finished("agent done"))
        async with running_bot(settings, MACHINE, executors={"claude": engine}) as app:
            await fake.user_message("/claude MARK-LONG go", OWNER)
            refused = await fake.wait_text(OWNER, ".detach.toml")
            assert "at most 2000" in refused.params["text"]
            assert await app.store.tasks.get(1) is None
