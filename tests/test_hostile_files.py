"""Files an agent could have planted where the bot reads them: a FIFO, a character device (a
link to /dev/zero, and one made with mknod), a 1 GB sparse file and a symlink loop, as a
repository's ``.detach.toml``, a task file in the inbox, a held set's ``held.json`` and a new
file on the board's diff. Each ends refused (or capped) at once, and the whole bot keeps
answering another chat while it happens: the task runs without the repository's check and its
acknowledgement says what was ignored; the task file is rejected with the reason."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.errors import FileRefused, Unreadable
from bot.models import TaskStatus
from bot.tasks.checks import repository_check
from bot.telegram.held import Held, HeldFiles
from executors.reading import read_capped, read_regular
from tests.support.fake_engine import FakeEngine
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_checks import finished, until_status

OTHER = 222  # a second allowed user, in a chat of their own
MACHINE = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
KINDS = ("fifo", "device", "zero_link", "sparse", "loop")
WHY = {
    "fifo": Unreadable.SPECIAL,
    "device": Unreadable.SPECIAL,
    "zero_link": Unreadable.LINK,
    "sparse": Unreadable.TOO_LARGE,
    "loop": Unreadable.LINK,
}


def plant(path: Path, kind: str) -> None:
    """``kind`` at ``path``; a device only where mknod is allowed (root), else the test skips."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # what /dev/zero is
        except PermissionError:
            pytest.skip("mknod refused here")
    elif kind == "zero_link":
        path.symlink_to("/dev/zero")
    elif kind == "sparse":
        with path.open("wb") as file:
            file.truncate(1 << 30)
    elif kind == "loop":
        path.symlink_to(path.name)  # itself
    else:
        raise AssertionError(kind)


@pytest.fixture
def releaser() -> Iterator[list[Path]]:
    """FIFOs named here are opened for writing (then closed) whenever a reader waits on them,
    from 3 s on, for 15 s: a bot that blocks on one is freed after a stall of seconds (the
    test fails, it never hangs)."""
    fifos: list[Path] = []
    stop = threading.Event()

    def release() -> None:
        deadline = time.monotonic() + 15
        stop.wait(3.0)
        while not stop.is_set() and time.monotonic() < deadline:
            for fifo in list(fifos):
                with contextlib.suppress(OSError):  # nobody reads it (ENXIO), or it moved
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # a reader waits
            stop.wait(0.1)

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    yield fifos
    stop.set()
    thread.join(5)


# -- the reader ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_each_planted_kind_is_refused_at_once(tmp_path, kind, releaser):
    path = tmp_path / "planted"
    plant(path, kind)
    releaser.append(path)
    started = time.monotonic()
    with pytest.raises(FileRefused) as refused:
        read_capped(path, 64 * 1024)
    assert refused.value.why is WHY[kind]
    if kind != "sparse":
        assert read_regular(path, 64 * 1024) is None
    assert time.monotonic() - started < 0.5


def test_a_regular_file_is_read_whole_and_one_past_the_cap_is_refused(tmp_path):
    path = tmp_path / "file"
    path.write_bytes(b"x" * 1024)
    assert read_capped(path, 1024) == b"x" * 1024
    with pytest.raises(FileRefused) as refused:
        read_capped(path, 1023)
    assert refused.value.why is Unreadable.TOO_LARGE and refused.value.limit == 1023
    with pytest.raises(FileRefused) as missing:
        read_capped(tmp_path / "none", 10)
    assert missing.value.why is Unreadable.MISSING


@pytest.mark.parametrize("kind", KINDS)
def test_a_planted_detach_toml_is_refused_not_waited_on(tmp_path, kind, releaser):
    plant(tmp_path / ".detach.toml", kind)
    releaser.append(tmp_path / ".detach.toml")
    started = time.monotonic()
    with pytest.raises(FileRefused) as refused:
        repository_check(tmp_path)
    assert refused.value.why is WHY[kind]
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("kind", KINDS)
async def test_a_planted_held_json_is_no_held_set(tmp_path, kind, releaser):
    held = HeldFiles(tmp_path / "held")
    target = tmp_path / "held" / "1_10"
    target.mkdir(parents=True)
    plant(target / "held.json", kind)
    releaser.append(target / "held.json")
    started = time.monotonic()  # a loop blocked on the FIFO cannot time itself out
    assert await held.take(1, 10, 5) is None
    await held.asked(1, 10, 77)  # nothing to remember it in, and no wait either
    assert time.monotonic() - started < 1.0


async def test_a_held_set_names_only_its_own_files(tmp_path):
    held = HeldFiles(tmp_path / "held")
    staged = tmp_path / "abc123-a.txt"
    staged.write_text("a")
    target = held.hold(1, 10, 5, Held([staged], "", "", None, "en"))
    (tmp_path / "secret").write_text("not yours")
    meta = json.loads((target / "held.json").read_text())
    meta["names"] += ["../../secret", ".hidden", 7]
    (target / "held.json").write_text(json.dumps(meta))
    taken = await held.take(1, 10, 5)
    assert taken is not None and [p.name for p in taken.files] == ["abc123-a.txt"]


async def test_the_boards_diff_shows_planted_new_files_by_name_only(tmp_path):
    from bot.board.checkout import checkout_patch
    from executors.gitguard import GitGuard

    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    (repo / "a.txt").write_text("one\n")
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True, env=env)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", "one"], check=True, env=env)
    for kind in KINDS:
        try:
            plant(repo / f"new-{kind}", kind)
        except pytest.skip.Exception:
            continue
    (repo / "honest.txt").write_text("hello\n")
    async with asyncio.timeout(20):
        patch = await checkout_patch(GitGuard(), str(repo))
    assert patch is not None and "+hello" in patch
    assert "Binary or unreadable file b/new-sparse" in patch
    assert "\0" not in patch and len(patch) < 10_000


def test_attachments_are_not_placed_through_a_planted_link(tmp_path, workdir):
    from bot.telegram.attachments import place

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (workdir / ".detach").symlink_to(elsewhere)
    staged = tmp_path / "abc123-notes.txt"
    staged.write_text("the owner's file")
    place([staged], workdir)
    assert list(elsewhere.iterdir()) == [] and staged.exists()
    (workdir / ".detach").unlink()
    place([staged], workdir)
    assert (workdir / ".detach" / "attachments" / "abc123-notes.txt").read_text() == (
        "the owner's file"
    )


# -- the whole bot ------------------------------------------------------------------------------


async def answered_in(fake: FakeTelegram, user: int) -> float:
    """Seconds until the bot answers ``/tasks`` in ``user``'s chat (10 s at most)."""
    after = len(fake.calls)
    started = time.monotonic()
    await fake.user_message("/tasks", user)
    await fake.wait_call(
        "sendMessage", lambda c: int(c.params["chat_id"]) == user, timeout_s=10, after=after
    )
    return time.monotonic() - started


def repository(path: Path) -> Path:
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    return path


async def test_a_fifo_detach_toml_neither_freezes_the_bot_nor_stops_the_task(
    tmp_path, workdir, releaser
):
    """The task runs without the repository's check, its acknowledgement says why in one
    line, and another chat's /tasks answers in under a second meanwhile (an unprotected bot
    blocks on the FIFO until the releaser opens it, and fails here)."""
    (workdir / "plain").mkdir()
    plant(repository(workdir / "repo") / ".detach.toml", "fifo")
    releaser.append(workdir / "repo" / ".detach.toml")
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, "claude", workdir, allowed_users=frozenset({OWNER, OTHER})
        )
        engine = FakeEngine(finished("agent done"))
        async with running_bot(settings, MACHINE, executors={"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude mode=auto cwd=plain MARK-WARM go", OWNER)
            await until_status(app, 1, TaskStatus.DONE)  # a new bot's first task: its imports
            await fake.user_message("/claude mode=auto cwd=repo MARK-FIFO go", OWNER)
            seconds = await answered_in(fake, OTHER)
            ack = await fake.wait_text(OWNER, "#2 ", timeout_s=10)
            task = await until_status(app, 2, TaskStatus.DONE)
    assert seconds < 1.0, seconds
    text = ack.params["text"]
    assert "is not a regular file (a FIFO, a device or a directory): ignored" in text, text
    assert "the task runs without the repository's check" in text
    assert task.check is None and task.check_repository is None
    assert len(engine.specs) == 2


async def test_planted_task_files_are_rejected_at_once(tmp_path, workdir, releaser):
    """Each planted ``*.md`` in the inbox is moved to ``rejected/`` with its reason and its
    owner told, while another chat's /tasks answers in under a second."""
    inbox = tmp_path / "data" / "inbox"
    inbox.mkdir(parents=True)
    planted = []
    for kind in KINDS:
        try:
            plant(inbox / f"{kind}.md", kind)
            planted.append(kind)
        except pytest.skip.Exception:
            continue
    releaser.append(inbox / "fifo.md")
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, "claude", workdir, allowed_users=frozenset({OWNER, OTHER})
        )
        engine = FakeEngine(finished("agent done"))
        async with running_bot(settings, MACHINE, executors={"claude": engine}):
            await fake.wait_call("setMyCommands")
            seconds = await answered_in(fake, OTHER)
            said = {
                kind: (await fake.wait_text(OWNER, f"<code>{kind}.md</code>", timeout_s=10))
                for kind in planted
            }
    assert seconds < 1.0, seconds
    assert "is not a regular file" in said["fifo"].params["text"]
    assert "is a symbolic link" in said["zero_link"].params["text"]
    assert "is larger than 256 KiB" in said["sparse"].params["text"]
    assert "is a symbolic link" in said["loop"].params["text"]
    assert sorted(p.name for p in (inbox / "rejected").glob("*.md")) == sorted(
        f"{kind}.md" for kind in planted
    )
    assert engine.specs == []
