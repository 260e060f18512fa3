"""Task worktrees with real git: created under the data dir on their own branch, diffed, merged
into the base branch (refused on conflict), discarded (refused while holding work unless
confirmed); and the whole path through the bot with the real claude CLI."""

from __future__ import annotations

import asyncio
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from bot.errors import UserInputError
from bot.git.repository import top_level
from bot.git.worktrees import Worktrees
from bot.models import TaskKind, TaskStatus
from bot.settings import Settings
from bot.store import Store
from bot.telegram.callbacks import TaskAction
from executors.gitguard import GitGuard
from tests.support.fake_telegram import TOKEN
from tests.support.harness import app_in_own_task, wait_sent
from tests.support.recording_session import RecordingSession
from tests.test_handlers import OWNER, feed, message, press

GIT = GitGuard()  # the bot's git, confined (nothing denied in these tests)


def sh_git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=T", "-c", "user.email=t@t", "-C", str(cwd), *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()


def make_repo(path: Path) -> Path:
    path.mkdir(parents=True)
    sh_git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("hello\n")
    (path / "src").mkdir()
    (path / "src" / "app.py").write_text("print('v1')\n")
    sh_git(path, "add", "-A")
    sh_git(path, "commit", "-q", "-m", "initial")
    return path


def bot_settings(
    tmp_path: Path, claude_bin: str, workdir: Path, worktrees: bool = True
) -> Settings:
    """The bot's settings; ``worktrees``: DETACH_WORKTREES (every task in a repository gets
    one)."""
    return Settings(
        _env_file=None,
        bot_token=TOKEN,
        allowed_users=frozenset({OWNER}),
        data_dir=tmp_path / "data",
        claude_bin=claude_bin,
        workdir=workdir,
        outbox_chat_interval_s=0,
        worktrees=worktrees,
    )  # type: ignore[call-arg]


@pytest.fixture
async def store(tmp_path):
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    yield store
    await store.close()


async def test_created_outside_the_repository_on_its_own_branch(tmp_path, store):
    repo = make_repo(tmp_path / "repo")
    trees = Worktrees(store, tmp_path / "data" / "worktrees", GIT)
    created = await trees.create(7, "fix-it", repo / "src")
    path = Path(created.row.path)
    assert path.parent == (tmp_path / "data" / "worktrees").resolve()
    assert not path.is_relative_to(repo)
    assert created.cwd == path / "src"  # the task's directory, inside the worktree
    assert sh_git(path, "branch", "--show-current") == "detach/7-fix-it"
    assert (created.row.base_branch, created.row.state) == ("main", "active")
    assert sh_git(repo, "branch", "--show-current") == "main"  # the user's checkout untouched


async def test_the_repositorys_top_is_found_where_git_finds_it(tmp_path, store):
    """``top_level`` looks at the directories instead of spawning git: the same answer as
    ``git rev-parse --show-toplevel`` for a repository, a subdirectory, a nested repository,
    a linked worktree (a ``.git`` file), a ``.git`` that is no repository, and no repository."""
    repo = make_repo(tmp_path / "repo")
    nested = make_repo(repo / "src" / "vendored")
    linked = Path((await Worktrees(store, tmp_path / "wt", GIT).create(3, "t", repo)).row.path)
    (tmp_path / "repo" / "src" / "fake" / ".git").mkdir(parents=True)  # no HEAD: not one
    (tmp_path / "plain" / "deeper").mkdir(parents=True)
    cases = {
        repo: repo,
        repo / "src": repo,
        repo / "src" / "fake": repo,
        nested: nested,
        linked / "src": linked,
        tmp_path / "plain" / "deeper": None,
    }
    for cwd, expected in cases.items():
        asked = subprocess.run(
            ["git", "-C", str(cwd), "rev-parse", "--show-toplevel"], capture_output=True, text=True
        )
        by_git = Path(asked.stdout.strip()).resolve() if asked.returncode == 0 else None
        assert by_git == (expected.resolve() if expected else None), cwd
        assert await top_level(cwd, GIT) == by_git, cwd


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a repository to another user needs root")
async def test_a_repository_of_another_user_is_left_to_git(tmp_path):
    """git refuses a repository this user does not own (``safe.directory``); so does
    ``top_level``, whose ``.detach.toml`` would name a command to run."""
    theirs = make_repo(tmp_path / "theirs")
    (theirs / ".detach.toml").write_text('check = "touch pwned"\n')
    subprocess.run(["chown", "-R", "nobody", str(theirs)], check=True)
    assert await top_level(theirs / "src", GIT) is None


async def test_not_a_repository_is_refused(tmp_path, store):
    (tmp_path / "plain").mkdir()
    with pytest.raises(UserInputError) as refused:
        await Worktrees(store, tmp_path / "wt", GIT).head(tmp_path / "plain")
    assert refused.value.key == "worktree.not_a_repo"


async def test_a_repository_without_commits_or_on_a_detached_head(tmp_path, store):
    """One git process tells the top, the commit and the branch: a repository with no commit
    yet is refused by name; a detached HEAD gives a worktree based on that commit."""
    trees = Worktrees(store, tmp_path / "wt", GIT)
    (tmp_path / "empty").mkdir()
    sh_git(tmp_path / "empty", "init", "-q")
    with pytest.raises(UserInputError) as refused:
        await trees.create(1, "t", tmp_path / "empty")
    assert refused.value.key == "worktree.no_commits"
    assert refused.value.params["path"] == str((tmp_path / "empty").resolve())
    repo = make_repo(tmp_path / "repo")
    head = await trees.head(repo / "src")
    assert (head.top, head.branch) == (repo.resolve(), "main")
    sh_git(repo, "checkout", "-q", "--detach")
    detached = await trees.create(2, "d", repo / "src")
    assert detached.row.base_branch == detached.row.base_commit == head.commit
    assert detached.cwd == Path(detached.row.path) / "src"


async def test_diff_then_merge_into_the_base_branch(tmp_path, store):
    repo = make_repo(tmp_path / "repo")
    trees = Worktrees(store, tmp_path / "wt", GIT)
    created = await trees.create(1, "feature", repo)
    path = Path(created.row.path)
    (path / "src" / "app.py").write_text("print('v2')\n")
    (path / "NEW.txt").write_text("brand new\n")
    diff = await trees.diff(1)
    assert "src/app.py" in diff.stat and "NEW.txt" in diff.stat
    assert "+print('v2')" in diff.patch and "+brand new" in diff.patch
    assert await trees.merge(1, "#1 feature: add things") == "main"
    assert (repo / "NEW.txt").read_text() == "brand new\n"
    assert (repo / "src" / "app.py").read_text() == "print('v2')\n"
    assert not path.exists()
    assert "detach/1-feature" not in sh_git(repo, "branch", "--list")
    assert (await store.worktrees.get(1)).state == "merged"
    with pytest.raises(UserInputError) as again:
        await trees.merge(1, "again")
    assert again.value.key == "worktree.already_merged"


async def test_a_conflicting_merge_is_refused_and_changes_nothing(tmp_path, store):
    repo = make_repo(tmp_path / "repo")
    trees = Worktrees(store, tmp_path / "wt", GIT)
    created = await trees.create(2, "clash", repo)
    (Path(created.row.path) / "README.md").write_text("the task's version\n")
    (repo / "README.md").write_text("the user's version\n")
    sh_git(repo, "commit", "-q", "-am", "user edit")
    head = sh_git(repo, "rev-parse", "HEAD")
    with pytest.raises(UserInputError) as refused:
        await trees.merge(2, "#2 clash")
    assert refused.value.key == "worktree.conflict"
    assert "README.md" in refused.value.params["files"]
    assert sh_git(repo, "rev-parse", "HEAD") == head
    assert sh_git(repo, "status", "--porcelain") == ""  # no merge left half-done
    assert Path(created.row.path).exists() and (await store.worktrees.get(2)).state == "active"


async def test_discard_with_work_needs_the_second_button(tmp_path, store):
    repo = make_repo(tmp_path / "repo")
    trees = Worktrees(store, tmp_path / "wt", GIT)
    empty = await trees.create(3, "nothing", repo)
    assert await trees.discard(3, confirmed=False)  # no work: goes at once
    assert not Path(empty.row.path).exists()
    busy = await trees.create(4, "work", repo)
    (Path(busy.row.path) / "result.txt").write_text("the whole product\n")
    assert not await trees.discard(4, confirmed=False)
    assert (Path(busy.row.path) / "result.txt").exists()
    committed = await trees.create(5, "committed", repo)
    (Path(committed.row.path) / "c.txt").write_text("c\n")
    sh_git(Path(committed.row.path), "add", "-A")
    sh_git(Path(committed.row.path), "commit", "-q", "-m", "agent commit")
    assert not await trees.discard(5, confirmed=False)  # commits not in main are work too
    assert await trees.discard(4, confirmed=True)
    assert not Path(busy.row.path).exists()
    assert "detach/4-work" not in sh_git(repo, "branch", "--list")
    assert (await store.worktrees.get(4)).state == "discarded"


async def test_worktree_task_through_the_bot(tmp_path, claude_bin, agent_env, anthropic, workdir):
    repo = make_repo(workdir / "repo")
    anthropic.script(
        "MARK-WT",
        [
            {
                "tool_use": {
                    "name": "Write",
                    "input": {"file_path": "NOTES.md", "content": "written by the agent\n"},
                }
            },
            {"text": "Wrote NOTES.md."},
        ],
    )
    settings = bot_settings(tmp_path, claude_bin, workdir, worktrees=False)
    async with app_in_own_task(settings, session=RecordingSession(), environ=agent_env) as app:
        session = await feed(app, message("/claude worktree=yes mode=auto cwd=repo MARK-WT go"))
        task = await app.store.tasks.get(1)
        assert Path(task.cwd).is_relative_to((tmp_path / "data" / "worktrees").resolve())
        async with asyncio.timeout(60):
            while (task := await app.store.tasks.get(1)).status.active:
                await asyncio.sleep(0.1)
        assert task.status is TaskStatus.DONE
        merge = TaskAction(action="merge", task_id=1).pack()
        await wait_sent(
            session,
            lambda c: (
                c.reply_markup is not None
                and merge
                in [b.callback_data for row in c.reply_markup.inline_keyboard for b in row]
            ),
        )
        assert (Path(task.cwd) / "NOTES.md").exists() and not (repo / "NOTES.md").exists()

        session = await feed(app, press(TaskAction(action="discard", task_id=1).pack()))
        assert "holds work" in session.new_texts()
        session = await feed(app, press(TaskAction(action="diff", task_id=1).pack()))
        assert "+written by the agent" in session.new_texts()
        session = await feed(app, press(TaskAction(action="merge", task_id=1).pack()))
        card = await wait_sent(  # the card says it, and loses its worktree buttons
            session,
            lambda c: type(c).__name__ == "EditMessageText" and "merged into" in c.text,
            10,
            method="EditMessageText",
        )
        assert "merged into <code>main</code>" in card.text
        assert "Merge" not in str(card.reply_markup) and "Follow up" in str(card.reply_markup)
        assert (repo / "NOTES.md").read_text() == "written by the agent\n"
        session = await feed(app, press(TaskAction(action="merge", task_id=1).pack()))
        alert = session.sent("AnswerCallbackQuery")[-1]  # said where it was tapped, at once
        assert alert.show_alert and "Already merged into main" in alert.text
        refused = await feed(app, message("/claude worktree=yes hi"))  # workdir: no repo
        assert "needs a git repository" in refused.new_texts()
        refused = await feed(app, message("/claude worktree=maybe cwd=repo hi"))
        assert "use yes or no" in refused.new_texts()
        assert await app.store.tasks.get(2) is None


async def test_a_task_file_asking_for_a_worktree_gets_one(tmp_path, claude_bin, agent_env, workdir):
    make_repo(workdir / "repo")
    settings = bot_settings(tmp_path, claude_bin, workdir, worktrees=False)
    async with app_in_own_task(settings, session=RecordingSession(), environ=agent_env) as app:
        (tmp_path / "data" / "inbox" / "wt.md").write_text(
            "---\ncwd: repo\nworktree: yes\n---\n# Goal\nsay ok\n"
        )
        await app.intake.poll_once()
        task = await app.store.tasks.get(1)
        assert task is not None
        assert Path(task.cwd).is_relative_to((tmp_path / "data" / "worktrees").resolve())
        assert (await app.store.worktrees.get(1)).branch == "detach/1-say-ok"
        async with asyncio.timeout(60):
            while (await app.store.tasks.get(1)).status.active:
                await asyncio.sleep(0.1)


async def test_the_default_setting_gives_worktrees_only_inside_repositories(
    tmp_path, claude_bin, agent_env, workdir
):
    make_repo(workdir / "repo")
    settings = bot_settings(tmp_path, claude_bin, workdir)
    async with app_in_own_task(settings, session=RecordingSession(), environ=agent_env) as app:
        await feed(app, message("/detach plain directory"))  # not a repository: no worktree
        assert (await app.store.tasks.get(1)).cwd == str(workdir.resolve())
        await feed(app, message("/detach cwd=repo in the repo"))
        assert await app.store.worktrees.get(2) is not None
        await feed(app, message("/detach worktree=no cwd=repo opted out"))
        assert await app.store.worktrees.get(3) is None
        refused = await feed(app, message("/detach worktree=yes explicit outside"))
        assert "needs a git repository" in refused.new_texts()
        async with asyncio.timeout(60):
            for task_id in (1, 2, 3):
                while (await app.store.tasks.get(task_id)).status.active:
                    await asyncio.sleep(0.1)


async def test_a_worktree_is_cut_from_the_head_the_planner_found(
    tmp_path, claude_bin, agent_env, workdir
):
    """A new worktree task asks git for its repository once: the planner's look-up travels
    with the NewTask and the worktree is cut from the commit it saw (a commit landing between
    the two does not move it); a NewTask made without one is looked up when it starts."""
    repo = make_repo(workdir / "repo")
    settings = bot_settings(tmp_path, claude_bin, workdir)
    async with app_in_own_task(settings, session=RecordingSession(), environ=agent_env) as app:
        new = await app.uses.create.plan(
            OWNER, OWNER, TaskKind.DETACH, {"cwd": "repo"}, "say ok", "en", "detach"
        )
        seen = sh_git(repo, "rev-parse", "HEAD")
        assert new.worktree and new.head is not None and new.head.commit == seen
        (repo / "README.md").write_text("moved on\n")
        sh_git(repo, "commit", "-qam", "a commit between plan and start")
        planned = await app.uses.create.start(new)
        unplanned = await app.uses.create.start(replace(new, head=None))
        rows = [await app.store.worktrees.get(t.id) for t in (planned, unplanned)]
        assert rows[0] is not None and rows[0].base_commit == seen
        assert sh_git(Path(rows[0].path), "rev-parse", "HEAD") == seen
        assert rows[1] is not None and rows[1].base_commit == sh_git(repo, "rev-parse", "HEAD")
        async with asyncio.timeout(60):
            for task in (planned, unplanned):
                while (await app.store.tasks.get(task.id)).status.active:
                    await asyncio.sleep(0.1)


@pytest.mark.parametrize("configured", [True, False])
async def test_a_merge_is_authored_by_the_owners_git_identity(
    tmp_path, store, monkeypatch, configured
):
    home = tmp_path / "owner-home"
    home.mkdir()
    if configured:
        (home / ".gitconfig").write_text("[user]\n\tname = Ada Owner\n\temail = ada@example.org\n")
    monkeypatch.setenv("HOME", str(home))  # the owner's global configuration, and only it
    repo = make_repo(tmp_path / "repo")
    sh_git(repo, "config", "user.name", "Planted Name")  # the repository's own: not used
    trees = Worktrees(store, tmp_path / "wt", GIT)
    created = await trees.create(1, "feature", repo)
    (Path(created.row.path) / "NEW.txt").write_text("new\n")
    await trees.merge(1, "#1 feature")
    authors = [sh_git(repo, "log", "-1", "--format=%an <%ae>", rev) for rev in ("HEAD", "HEAD^2")]
    expected = "Ada Owner <ada@example.org>" if configured else "Detach <detach@localhost>"
    assert authors == [expected, expected]  # the merge and the commit of what was left
