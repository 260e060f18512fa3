"""A task's life after Merge or Discard, with real git and the real bot (a replayed engine): its
worktree is cut again at the same path for the next turn, from the branch it was merged into or
from where it started; Merge and Discard are offered only while there is work; the chat and the
board say "merged" at once, and a second Merge answers so."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from bot.errors import UserInputError
from bot.git.worktrees import Worktrees
from bot.models import NewTask, TaskKind, TaskStatus, TurnSpec
from bot.store import Store, WorktreeRow
from bot.telegram.callbacks import TaskAction, TaskButton
from executors.gitguard import GitGuard
from tests.support.fake_engine import FakeEngine
from tests.support.postgres import STORE_KINDS, opened_store
from tests.test_board import SESSION, bot_with_board, finished, signed_in, wait_status
from tests.test_handlers import feed, message, press
from tests.test_worktrees import make_repo, sh_git

GIT = GitGuard()


@pytest.fixture
async def store(tmp_path):
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    yield store
    await store.close()


async def test_a_merged_worktree_is_cut_again_from_its_branch_as_it_is_now(tmp_path, store):
    repo = make_repo(tmp_path / "repo")
    trees = Worktrees(store, tmp_path / "wt", GIT)
    path = Path((await trees.create(1, "feature", repo / "src")).row.path)
    (path / "NEW.txt").write_text("one\n")
    await trees.merge(1, "#1 feature")
    (repo / "README.md").write_text("the owner went on\n")
    sh_git(repo, "commit", "-qam", "the owner's commit after the merge")
    tip = sh_git(repo, "rev-parse", "HEAD")
    was = await trees.reopen(1)
    assert was is not None and (was.state, was.base_commit) == ("merged", tip)
    row = await store.worktrees.get(1)
    assert (row.state, row.path, row.branch, row.base_commit) == (
        "active",
        str(path),
        "detach/1-feature",
        tip,
    )
    assert sh_git(path, "rev-parse", "HEAD") == tip
    assert sh_git(path, "branch", "--show-current") == "detach/1-feature"
    assert (path / "NEW.txt").read_text() == "one\n" and (path / "src").is_dir()
    assert not await trees.offers(1)  # nothing of its own yet: no Merge, no Discard
    assert await trees.reopen(1) is None  # there already: nothing to do
    with pytest.raises(UserInputError) as nothing:
        await trees.merge(1, "#1 nothing")
    assert nothing.value.key == "worktree.nothing_to_merge" and path.is_dir()
    (path / "MORE.txt").write_text("two\n")
    assert await trees.offers(1)
    assert await trees.merge(1, "#1 again") == "main"  # merged a second time
    assert (repo / "MORE.txt").read_text() == "two\n" and not path.exists()


async def test_a_discarded_worktree_is_cut_again_from_where_it_started(tmp_path, store):
    repo = make_repo(tmp_path / "repo")
    trees = Worktrees(store, tmp_path / "wt", GIT)
    created = await trees.create(2, "spike", repo)
    path, start = Path(created.row.path), created.row.base_commit
    (path / "THROWAWAY.txt").write_text("x\n")
    sh_git(path, "add", "-A")
    sh_git(path, "commit", "-qm", "the agent's commit")
    assert await trees.discard(2, confirmed=True)
    (repo / "README.md").write_text("main moved on\n")
    sh_git(repo, "commit", "-qam", "main moved")
    was = await trees.reopen(2)
    assert was is not None and was.state == "discarded"
    row = await store.worktrees.get(2)
    assert (row.state, row.path, row.base_commit) == ("active", str(path), start)
    assert sh_git(path, "rev-parse", "HEAD") == start
    assert not (path / "THROWAWAY.txt").exists()
    assert (path / "README.md").read_text() == "hello\n"  # where it started, not main now


async def test_a_worktree_whose_branch_is_gone_is_refused_by_name(tmp_path, store):
    repo = make_repo(tmp_path / "repo")
    trees = Worktrees(store, tmp_path / "wt", GIT)
    path = Path((await trees.create(3, "lost", repo)).row.path)
    (path / "N.txt").write_text("n\n")
    await trees.merge(3, "#3 lost")
    sh_git(repo, "checkout", "-qb", "elsewhere")
    sh_git(repo, "branch", "-qD", "main")
    with pytest.raises(UserInputError) as refused:
        await trees.reopen(3)
    assert refused.value.key == "worktree.base_gone" and refused.value.params["base"] == "main"
    assert (await store.worktrees.get(3)).state == "merged" and not path.exists()


@pytest.mark.parametrize("kind", STORE_KINDS)
async def test_a_worktree_row_is_made_active_again_and_each_change_moves_the_pulse(kind, tmp_path):
    async with opened_store(kind, tmp_path) as store:
        task, _turn = await store.tasks.create(
            NewTask(1, 1, "claude", TaskKind.SESSION, "go", tmp_path), "go"
        )
        row = WorktreeRow(task.id, "/repo", "/wt/1-go", "detach/1-go", "main", "c1", "active")
        await store.worktrees.add(row)
        marks = [await store.pulse.mark()]
        await store.worktrees.set_state(task.id, "merged")
        marks.append(await store.pulse.mark())
        assert await store.worktrees.states_of([task.id, task.id + 1]) == {task.id: "merged"}
        await store.worktrees.reopen(task.id, "c2")
        marks.append(await store.pulse.mark())
        assert await store.worktrees.get(task.id) == replace(row, base_commit="c2")
        assert marks[0] != marks[1] != marks[2]  # an open board page hears of each


def writer(engine_specs: list[TurnSpec]):  # type: ignore[no-untyped-def]
    """An agent that writes ``turn-<n>.md`` when asked to "write", else only answers."""

    def script(spec: TurnSpec) -> tuple:
        n = len(engine_specs)
        if "write" in spec.prompt:
            (spec.cwd / f"turn-{n}.md").write_text(f"turn {n}\n")
        return finished(f"turn {n}")

    return script


def agent() -> FakeEngine:
    specs: list[TurnSpec] = []
    engine = FakeEngine(writer(specs))
    engine.specs = specs
    return engine


async def newest_card(app, task_id: int, after: int):  # type: ignore[no-untyped-def]
    """The newest completion card of ``task_id`` queued after outbox row ``after``."""
    async with asyncio.timeout(10):
        while (row := await app.store.outbox.newest_send(task_id, "result")) is None or (
            row.id <= after or row.status != "sent"
        ):
            await asyncio.sleep(0.02)
    return row


async def settled(app, task_id: int, turns: int) -> None:
    async with asyncio.timeout(10):
        while len(await app.store.tasks.turns_of(task_id)) < turns or (
            (await app.store.tasks.get(task_id)).status.active
        ):
            await asyncio.sleep(0.02)


def offered(row) -> set[str]:  # type: ignore[no-untyped-def]
    keyboard = (row.payload.get("markup") or {}).get("inline_keyboard") or []
    return {TaskAction.unpack(b["callback_data"]).action for line in keyboard for b in line}


WORKTREE_BUTTONS = {TaskButton.DIFF, TaskButton.MERGE, TaskButton.DISCARD}


async def test_the_card_offers_merge_and_discard_only_while_the_worktree_holds_work(
    tmp_path, workdir
):
    make_repo(workdir / "repo")
    async with bot_with_board(tmp_path, workdir, agent()) as (app, _board):
        await feed(app, message("/claude worktree=yes cwd=repo only look"))
        await settled(app, 1, 1)
        card = await newest_card(app, 1, 0)
        assert TaskButton.FOLLOWUP in offered(card) and not WORKTREE_BUTTONS & offered(card)
        replied_to = await app.store.outbox.message_id_of(card.id)
        await feed(app, message("now write it", reply_to=replied_to))  # a reply to the card
        await settled(app, 1, 2)
        second = await newest_card(app, 1, card.id)
        assert offered(second) >= WORKTREE_BUTTONS
        await feed(app, message("/result 1"))  # sent again: what the worktree holds now
        again = await newest_card(app, 1, second.id)
        assert offered(again) >= WORKTREE_BUTTONS


async def test_to_terminal_after_a_merge_cuts_the_worktree_again_where_the_line_says(
    tmp_path, workdir
):
    repo = make_repo(workdir / "repo")
    async with bot_with_board(tmp_path, workdir, agent()) as (app, _board):
        await feed(app, message("/claude worktree=yes cwd=repo write it"))
        await settled(app, 1, 1)
        cwd = Path((await app.store.tasks.get(1)).cwd)
        session = await feed(app, press(TaskAction(action="merge", task_id=1).pack()))
        assert (repo / "turn-1.md").exists() and not cwd.exists()
        session = await feed(app, press(TaskAction(action="to_terminal", task_id=1).pack()))
        held = session.new_texts()
        assert f"cd {cwd} &amp;&amp; claude --resume {SESSION}" in held
        assert "a fresh worktree from <code>main</code>" in held
        assert cwd.is_dir() and (cwd / "turn-1.md").exists()  # the merged work, in place


async def event(stream: aiohttp.ClientResponse, needle: str, timeout_s: float) -> dict:
    """The first ``task`` event of a board stream whose data holds ``needle``."""
    async with asyncio.timeout(timeout_s):
        while True:
            line = (await stream.content.readline()).decode()
            if line.startswith("data: ") and needle in line:
                return json.loads(line.removeprefix("data: "))


async def test_after_a_merge_the_board_says_so_at_once_and_a_follow_up_goes_on_in_place(
    tmp_path, workdir
):
    repo = make_repo(workdir / "repo")
    engine = agent()
    async with bot_with_board(tmp_path, workdir, engine) as (app, board):
        await feed(app, message("/claude worktree=yes cwd=repo write it"))
        await wait_status(app, 1, TaskStatus.DONE)
        cwd = (await app.store.tasks.get(1)).cwd
        http, csrf = await signed_in(app, board)
        url, headers = f"{board.url}/api/tasks/1", {"X-CSRF-Token": csrf}
        async with http:
            async with http.get(url) as response:
                page = await response.json()
            assert page["worktree"] == {"state": "active", "base": "main", "changes": True}
            async with http.get(f"{url}/stream") as stream:
                await event(stream, '"changes":true', 5)
                await feed(app, press(TaskAction(action="merge", task_id=1).pack()))  # the chat
                page = (await event(stream, '"state":"merged"', 2))["worktree"]
            assert page == {"state": "merged", "base": "main", "changes": False}
            async with http.get(f"{board.url}/api/tasks") as response:
                rows = (await response.json())["tasks"]
            assert rows[0]["worktree"] == "merged"
            async with http.post(f"{url}/merge", headers=headers) as response:
                assert response.status == 409
                assert "Already merged into main" in (await response.json())["text"]
            async with http.get(f"{url}/diff") as response:
                assert (await response.json())["note"] == "worktree.already_merged"
            async with http.post(f"{url}/followup", json={"prompt": "write more"}, headers=headers):
                pass
            await settled(app, 1, 2)
            spec = engine.specs[-1]
            assert (str(spec.cwd), spec.resume_session_id) == (
                cwd,
                SESSION,
            )  # same session, same place
            async with http.get(url) as response:
                page = await response.json()
            assert page["worktree"] == {"state": "active", "base": "main", "changes": True}
            async with http.post(f"{url}/merge", headers=headers) as response:
                assert (await response.json()) == {"ok": True, "text": "Merged."}
    assert (repo / "turn-1.md").exists() and (repo / "turn-2.md").exists()


async def test_a_file_sent_as_a_reply_after_a_merge_lands_in_the_worktree_cut_again(
    tmp_path, workdir
):
    from tests.support.fake_telegram import FakeTelegram
    from tests.support.harness import OWNER, running_bot
    from tests.test_phone import settings

    make_repo(workdir / "repo")
    engine = agent()
    async with FakeTelegram() as fake:
        async with running_bot(settings(tmp_path, fake, workdir), {}, {"claude": engine}) as app:
            await fake.wait_call("setMyCommands")
            await fake.user_message("/claude worktree=yes cwd=repo write it", OWNER)
            card = await fake.wait_text(OWNER, "turn 1", timeout_s=20)
            cwd = Path((await app.store.tasks.get(1)).cwd)
            merge = TaskAction(action="merge", task_id=1).pack()
            await fake.press(OWNER, card.result["message_id"], merge, OWNER)
            await fake.wait_call("editMessageText", lambda c: "merged into" in c.params["text"])
            assert not cwd.exists()
            reply = card.result["message_id"]
            await fake.user_document(b"n\n", "notes.txt", OWNER, "read it", reply)
            await fake.wait_text(OWNER, "turn 2", timeout_s=20)
            assert engine.specs[-1].cwd == cwd and engine.specs[-1].resume_session_id == SESSION
            [placed] = (cwd / ".detach" / "attachments").glob("*notes.txt")
            assert placed.read_bytes() == b"n\n" and placed.name in engine.specs[-1].prompt
            assert (cwd / "turn-1.md").exists()  # cut from main, where the merge put it
