"""A hostile agent plants programs in a repository's configuration (core.fsmonitor, hooks,
diff.external, a textconv, filter drivers with .gitattributes, core.pager, an include.path, a
merge driver) and waits for the bot's own git to run them with the bot's rights. Each planted
program writes a marker file; the bot's real git paths (the completion card's diff_stat,
diff_text for a take-over, a task worktree's create / Show diff / Merge / Discard) must leave
no marker and still give the right answer. A control shows each plant is live with a plain git.
Where the agent can plant them: a plain directory where it made a whole ``.git`` (Claude's
sandbox allows it, measured below), a sub-directory of a checkout, a worktree's ``.git`` file."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from bot.errors import UserInputError
from bot.events import SessionStarted, TurnFinished
from bot.git.worktrees import Worktrees
from bot.models import ApprovalMode, TurnSpec
from bot.store import Store
from bot.turns.baseline import take, turn_changes
from bot.turns.gitinfo import diff_stat, diff_text
from executors.claude import ClaudeExecutor
from executors.codex import CodexExecutor
from executors.gitguard import GitGuard
from executors.gitscope import BASE, from_listing
from tests.support.chat_mock import ChatMock
from tests.support.fake_telegram import FakeTelegram
from tests.support.harness import OWNER, make_settings, running_bot
from tests.test_claude_executor import Scripted, collect
from tests.test_codex_executor import collect as collect_codex

HOOKS = (
    "post-checkout",
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-merge-commit",
    "post-merge",
    "reference-transaction",
    "post-index-change",
    "pre-auto-gc",
)
GIT = GitGuard()  # confined; nothing denied in these tests
ATTRIBUTES = "*.t diff=tc merge=mx\n*.f filter=fx\n*.i filter=inc diff=inc\n*.q filter=x=y\n"


def sh_git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=T", "-c", "user.email=t@t", "-C", str(cwd), *args],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
        env=env or _clean_env(),
    ).stdout.strip()


def _clean_env() -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"], "GIT_CONFIG_NOSYSTEM": "1"}


def make_repo(path: Path) -> Path:
    """A repository with one commit: files each planted attribute applies to."""
    path.mkdir(parents=True, exist_ok=True)
    sh_git(path, "init", "-q", "-b", "main")
    for name in ("a.t", "b.f", "c.i", "d.q", "plain.txt"):
        (path / name).write_text(f"{name} v1\n")
    sh_git(path, "add", "-A")
    sh_git(path, "commit", "-q", "-m", "initial")
    return path


def plant(gitdir: Path, markers: Path) -> None:
    """Every program-running setting, each touching its own marker, and every hook."""
    markers.mkdir(exist_ok=True)

    def run(name: str, then: str = "cat") -> str:
        return f'"touch {markers}/{name}; {then}"'

    (gitdir / "extra.cfg").write_text(
        f'[filter "inc"]\n\tclean = {run("include-clean")}\n\tsmudge = {run("include-smudge")}\n'
        f'[diff "inc"]\n\ttextconv = {run("include-textconv")}\n'
    )
    with (gitdir / "config").open("a") as config:
        config.write(
            f"[core]\n\tfsmonitor = {run('fsmonitor', 'echo')}\n\tpager = {run('pager')}\n"
            f"\teditor = {run('editor', 'true')}\n"
            f"[diff]\n\texternal = {run('diff-external', 'true')}\n"
            f'[diff "tc"]\n\ttextconv = {run("textconv")}\n\tcommand = {run("diff-command")}\n'
            f'[filter "fx"]\n\tclean = {run("clean")}\n\tsmudge = {run("smudge")}\n'
            f"\trequired = true\n"
            f'[filter "x=y"]\n\tclean = {run("odd-name-clean")}\n'
            f'[merge "mx"]\n\tdriver = {run("merge-driver", "true")}\n'
            f"[merge]\n\tdefault = mx\n"
            f"[gpg]\n\tprogram = {run('gpg', 'false')}\n[commit]\n\tgpgSign = true\n"
            f"[include]\n\tpath = extra.cfg\n"
        )
    (gitdir / "info").mkdir(exist_ok=True)
    (gitdir / "info" / "attributes").write_text(ATTRIBUTES)
    hooks = gitdir / "hooks"
    hooks.mkdir(exist_ok=True)
    for hook in HOOKS:
        (hooks / hook).write_text(f"#!/bin/sh\ntouch {markers}/hook-{hook}\n")
        (hooks / hook).chmod(0o755)


def edit(top: Path) -> None:
    """The agent's work: a change to each kind of file, and a new file."""
    for name in ("a.t", "b.f", "c.i", "d.q", "plain.txt"):
        with (top / name).open("a") as handle:
            handle.write(f"{name} v2\n")
    (top / "new.txt").write_text("new\n")


def fired(markers: Path) -> list[str]:
    return sorted(p.name for p in markers.iterdir()) if markers.exists() else []


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    return tmp_path / "markers"


@pytest.fixture
async def store(tmp_path):
    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    yield store
    await store.close()


def fake_repository(top: Path, markers: Path) -> Path:
    """A plain directory where the agent made a whole ``.git`` and planted it."""
    make_repo(top)
    plant(top / ".git", markers)
    edit(top)
    return top


def test_every_plant_is_live_with_a_plain_git(tmp_path, markers):
    """The control: git as a program without the bot's overrides runs what was planted."""
    top = fake_repository(tmp_path / "plain", markers)
    subprocess.run(["git", "-C", str(top), "diff", "HEAD"], env=_clean_env(), capture_output=True)
    subprocess.run(["git", "-C", str(top), "add", "-A"], env=_clean_env(), capture_output=True)
    subprocess.run(["git", "-C", str(top), "diff", "--no-ext-diff", "HEAD"], env=_clean_env())
    live = {"fsmonitor", "diff-command", "textconv", "clean", "include-clean", "odd-name-clean"}
    assert live | {"hook-post-index-change"} <= set(fired(markers)), fired(markers)


async def test_listing_the_configuration_runs_nothing(tmp_path, markers):
    top = fake_repository(tmp_path / "plain", markers)
    found = await GIT.scope(top)
    assert fired(markers) == []
    keys = dict(found.overrides)
    assert keys["filter.fx.clean"] == "" and keys["filter.fx.required"] == "false"
    assert keys["filter.x=y.clean"] == "" and keys["filter.inc.clean"] == ""  # the odd, included
    assert keys["diff.tc.textconv"] == "" and keys["merge.mx.driver"] == "false"
    assert found.refusal is None
    cli = found.cli_env(True)  # an agent CLI's: its start-up git runs no hook, fetches nothing
    given = {cli[f"GIT_CONFIG_KEY_{n}"] for n in range(int(cli["GIT_CONFIG_COUNT"]))}
    assert {"core.fsmonitor", "filter.fx.clean", "diff.tc.textconv"} <= given
    assert not given & {"core.hooksPath", "protocol.allow", "credential.helper"}


@pytest.mark.parametrize("where", ["plain directory", "repository sub-directory"])
async def test_the_completion_cards_git_runs_nothing_planted(tmp_path, markers, where):
    if where == "plain directory":
        top = fake_repository(tmp_path / "plain", markers)
    else:  # the task's directory is inside a clean checkout; the agent made its own .git there
        make_repo(tmp_path / "checkout")
        top = fake_repository(tmp_path / "checkout" / "sub", markers)
    stat = await diff_stat(GIT, str(top))
    text = await diff_text(GIT, str(top))
    assert fired(markers) == []
    for name in ("a.t", "b.f", "c.i", "d.q", "plain.txt"):
        assert name in stat
        assert text is not None and f"+{name} v2" in text  # the real content, no textconv
    assert "new.txt | new" in stat and "new file (untracked): new.txt" in text


async def test_the_turns_own_changes_run_nothing_planted(tmp_path, markers):
    """The plain checkout's card: the state before the turn, then what it changed (a commit
    and edits), through git that runs none of the repository's programs."""
    top = make_repo(tmp_path / "repo")
    plant(top / ".git", markers)
    (top / "plain.txt").write_text("the owner's edit\n")
    before = await take(GIT, str(top))
    assert fired(markers) == [], fired(markers)
    edit(top)  # the agent's commit, by a git that runs the plants (the agent's own)
    sh_git(top, "-c", "commit.gpgSign=false", "commit", "-q", "-am", "agent's commit")
    (top / "later.txt").write_text("after the commit\n")
    shutil.rmtree(markers)
    changes = await turn_changes(GIT, str(top), before)
    assert fired(markers) == [], fired(markers)
    assert "agent's commit" in changes and "a.t" in changes and "later.txt | new" in changes


async def test_a_work_tree_moved_to_a_parent_is_not_followed(tmp_path, markers):
    """The agent's own repository in a sub-directory, its work tree set to a parent (the
    owner's home, say): a planted HEAD would show the parent's files' content. Refused."""
    parent = tmp_path / "home"
    (parent / ".config").mkdir(parents=True)
    (parent / ".config" / "env").write_text("TOKEN=SECRET-IN-PARENT\n")
    top = fake_repository(parent / "project", markers)
    sh_git(top, "config", "core.worktree", "../..")
    assert await diff_stat(GIT, str(top)) == ""
    assert await diff_text(GIT, str(top)) is None
    assert fired(markers) == []


@pytest.mark.parametrize("how", ["a .git file", "a .git symlink", "a commondir"])
async def test_a_git_dir_borrowed_from_another_repository_is_not_followed(tmp_path, how):
    """The agent points its directory's ``.git`` at another repository's git directory (one it
    cannot read itself): the card and a take-over prompt would carry that repository's files
    (their content, as deletions). Refused; a bot worktree's own ``.git`` file still works."""
    other = make_repo(tmp_path / "private")
    (other / "secret.txt").write_text("SECRET-OF-ANOTHER-REPO\n")
    sh_git(other, "add", "secret.txt")
    sh_git(other, "commit", "-qm", "secret")
    top = tmp_path / "task"
    top.mkdir()
    if how == "a .git file":
        (top / ".git").write_text(f"gitdir: {other / '.git'}\n")
    elif how == "a .git symlink":
        (top / ".git").symlink_to(other / ".git")
    else:  # a git directory of its own whose common directory is the other one
        (top / ".git").mkdir()
        (top / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        (top / ".git" / "commondir").write_text(f"{other / '.git'}\n")
    assert "SECRET" not in (await diff_text(GIT, str(top)) or "") + await diff_stat(GIT, str(top))
    assert await diff_stat(GIT, str(top)) == ""


async def test_a_submodules_own_work_tree_is_followed(tmp_path):
    """A submodule's configuration names its own top as ``core.worktree``: that one works."""
    make_repo(tmp_path / "upstream")
    sup = make_repo(tmp_path / "super")
    sh_git(sup, "-c", "protocol.file.allow=always", "submodule", "add", "-q", "../upstream", "sm")
    sub = sup / "sm"
    assert "worktree" in sh_git(sub, "config", "--list")
    (sub / "a.t").write_text("changed\n")
    assert "a.t" in await diff_stat(GIT, str(sub))


async def test_a_moved_work_tree_is_not_followed(tmp_path, markers):
    """``core.worktree`` would point the bot's diff at another directory (its files' content
    in the card and a take-over prompt): refused, nothing listed."""
    top = fake_repository(tmp_path / "plain", markers)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.t").write_text("SECRET-ELSEWHERE\n")
    sh_git(top, "config", "core.worktree", str(elsewhere))
    assert await diff_stat(GIT, str(top)) == ""
    assert await diff_text(GIT, str(top)) is None
    assert fired(markers) == []


def test_a_driver_the_owner_defines_keeps_the_owners_program():
    """A repository redefining the owner's own filter (git-lfs's, say) gets the owner's value
    back, not nothing: the owner's global configuration is the owner's."""
    home, repo = "file:/home/o/.gitconfig", "file:/r/.git/config"
    listing = (
        f"global\0{home}\0filter.lfs.clean\ngit-lfs clean -- %f\0"
        f"global\0{home}\0filter.lfs.required\ntrue\0"
        f"local\0{repo}\0filter.lfs.clean\ntouch /tmp/x\0local\0{repo}\0diff.z.textconv\0"
    )
    keys = dict(from_listing(listing, Path("/r")).overrides)
    assert keys["filter.lfs.clean"] == "git-lfs clean -- %f"
    assert "filter.lfs.required" not in keys and keys["diff.z.textconv"] == ""


async def test_a_task_worktree_from_a_planted_repository_creates_diffs_merges_discards(
    tmp_path, markers, store
):
    """A previous task made a whole repository in a plain directory and planted it; a new task
    with its own worktree there: create (checkout: smudge, post-checkout), Show diff (add -N,
    diff: clean, textconv, fsmonitor), Merge (commit and merge: hooks, merge driver), Discard."""
    repo = make_repo(tmp_path / "planted")
    plant(repo / ".git", markers)
    trees = Worktrees(store, tmp_path / "data" / "worktrees", GIT)
    created = await trees.create(1, "merge-me", repo)
    work = Path(created.row.path)
    assert (work / "b.f").read_text() == "b.f v1\n"  # checked out, no smudge
    edit(work)
    diff = await trees.diff(1)
    assert "b.f" in diff.stat and "+a.t v2" in diff.patch and "new.txt" in diff.stat
    assert await trees.merge(1, "the task's work") == "main"
    assert (repo / "new.txt").read_text() == "new\n" and "a.t v2" in (repo / "a.t").read_text()
    await trees.create(2, "drop-me", repo)
    (Path((await trees.active(2)).path) / "junk.txt").write_text("junk\n")
    assert await trees.discard(2, confirmed=False) is False
    assert await trees.discard(2, confirmed=True) is True
    assert fired(markers) == []


async def test_a_planted_merge_driver_is_a_conflict_not_a_program(tmp_path, markers, store):
    repo = make_repo(tmp_path / "planted")
    plant(repo / ".git", markers)
    trees = Worktrees(store, tmp_path / "data" / "worktrees", GIT)
    created = await trees.create(1, "clash", repo)
    (Path(created.row.path) / "a.t").write_text("theirs\n")
    (repo / "a.t").write_text("ours\n")
    sh_git(repo, "commit", "-qam", "base moves", env=(await GIT.scope(repo)).env(str(Path.home())))
    with pytest.raises(UserInputError) as refused:
        await trees.merge(1, "clash")
    assert refused.value.key == "worktree.conflict"
    assert (repo / "a.t").read_text() == "ours\n"  # the merge was aborted
    assert fired(markers) == []


async def test_a_worktrees_git_file_pointed_at_a_planted_git_dir(tmp_path, markers, store):
    """Inside its worktree the agent may rewrite the ``.git`` file to name a git directory it
    made and planted; Show diff is refused and Discard still runs nothing."""
    repo = make_repo(tmp_path / "repo")
    trees = Worktrees(store, tmp_path / "data" / "worktrees", GIT)
    work = Path((await trees.create(1, "swap", repo)).row.path)
    fake = make_repo(tmp_path / "agent-made")
    plant(fake / ".git", markers)
    (work / ".git").write_text(f"gitdir: {fake / '.git'}\n")
    edit(work)
    with pytest.raises(UserInputError, match="worktree.failed"):
        await trees.diff(1)  # refused with the reason: not another repository's diff
    await trees.discard(1, confirmed=True)
    assert fired(markers) == []


async def test_the_bots_git_stays_fast(tmp_path):
    """The completion card's git in a clean repository (one configuration read, then two
    commands together): measured, a few milliseconds each on an idle machine."""
    top = make_repo(tmp_path / "repo")
    edit(top)
    await diff_stat(GIT, str(top))  # warm
    started = time.perf_counter()
    for _ in range(5):
        assert "a.t" in await diff_stat(GIT, str(top))
    per_card_s = (time.perf_counter() - started) / 5
    assert per_card_s < 0.5, per_card_s  # generous: a shared CI machine
    assert BASE.refusal is None


# -- end to end: the real claude CLI, sandboxed, plants a repository; the bot builds the card --


def bash(command: str) -> dict:
    return {"tool_use": {"name": "Bash", "input": {"command": command, "description": "d"}}}


async def test_a_sandboxed_claude_plants_a_repository_and_the_card_runs_nothing(
    tmp_path, claude_bin, agent_env, anthropic, workdir
):
    """Measured with Claude 2.1.197: in a plain directory its sandbox lets Bash create a
    ``.git`` with a config and hooks, no approval asked; the bot's card then runs git there.
    (Measured: a shell redirection into ``.git/config`` is asked for, ``git config`` is not; a
    command naming a path outside is asked for, so the planted programs touch files here.)"""
    planting = (
        "git init -q -b main && git config core.fsmonitor 'touch FSMONITOR-RAN; echo'"
        " && git config diff.external 'touch EXTERNAL-RAN'"
        " && printf '#!/bin/sh\\ntouch HOOK-RAN\\n' > .git/hooks/post-index-change"
        " && chmod +x .git/hooks/post-index-change && echo planted > work.txt && echo PLANTED"
    )
    anthropic.script("MARK-PLANT", [bash(planting), {"text": "planted it"}])
    async with FakeTelegram() as fake:
        settings = make_settings(tmp_path / "data", fake, claude_bin, workdir)
        fake.allow_sandboxed(OWNER, "echo PLANTED")  # its parse, run out of time under load
        async with running_bot(settings, agent_env):
            await fake.user_message("/detach MARK-PLANT go", OWNER)
            card = await fake.wait_text(OWNER, "planted it", timeout_s=90)
            assert "work.txt" in card.params["text"]  # the card's git still lists the change
            assert fake.asked() == []
    assert "FSMONITOR-RAN" in (workdir / ".git" / "config").read_text()  # the plant was made
    assert sorted(p.name for p in workdir.iterdir()) == [".git", "work.txt"]
    control = subprocess.run(["git", "-C", str(workdir), "status"], env=_clean_env(), timeout=30)
    assert control.returncode == 0 and (workdir / "FSMONITOR-RAN").exists()  # it was live


def sandboxed(prompt: str, cwd: Path, resume: str | None = None) -> TurnSpec:
    return TurnSpec(1, 1, prompt, cwd, resume_session_id=resume, approval_mode=ApprovalMode.SANDBOX)


async def test_claudes_own_git_at_its_next_start_runs_nothing_planted(
    claude_bin, agent_env, anthropic, workdir
):
    """Measured with Claude 2.1.197: at each start the CLI itself runs ``git status --short``
    and ``git log`` in its directory, outside its sandbox; a core.fsmonitor planted by the
    previous turn ran there as the owner. A clean filter on a tracked file whose stat changed
    would run the same way. A sandboxed turn's CLI gets the overrides in its environment."""
    planting = [  # .git/config is writable only in the command that makes .git (measured)
        "git init -q -b main && echo x > a.txt && git add a.txt"
        " && git config core.fsmonitor 'touch FSMONITOR-RAN; echo'"
        " && git config filter.fx.clean 'touch CLEAN-RAN; cat'",
        "printf '* filter=fx\\n' > .gitattributes",
        "touch -d 2001-01-01 a.txt",
    ]
    script = [*map(bash, planting), {"text": "planted"}, bash("echo 2"), {"text": "again"}]
    anthropic.script("MARK-NEXT", script)
    claude = ClaudeExecutor(claude_bin, agent_env)
    approver = Scripted()
    first = await collect(claude, sandboxed("MARK-NEXT go", workdir), approver)
    assert approver.requests == []  # planted with no approval
    session = next(e.session_id for e in first if isinstance(e, SessionStarted))
    second = await collect(claude, sandboxed("more", workdir, resume=session), Scripted())
    assert isinstance(second[-1], TurnFinished) and second[-1].result_text == "again"
    assert sorted(p.name for p in workdir.iterdir()) == [".git", ".gitattributes", "a.txt"]
    subprocess.run(["git", "-C", str(workdir), "status"], env=_clean_env(), capture_output=True)
    assert (workdir / "FSMONITOR-RAN").exists() and (workdir / "CLEAN-RAN").exists()  # live


async def test_codexs_own_git_runs_no_filter_a_previous_task_planted(
    codex_bin, codex_env, openai, workdir
):
    """Codex 0.171.0 guards its own git (fsmonitor, hooks) but not filter drivers: its ``git
    status`` at start ran a clean filter planted by an earlier task (of another engine) on a
    tracked file whose stat changed. A sandboxed Codex turn gets the overrides too."""
    sh_git(workdir, "init", "-q", "-b", "main")
    (workdir / "a.txt").write_text("x\n")
    sh_git(workdir, "add", "a.txt")
    sh_git(workdir, "config", "filter.fx.clean", "touch CLEAN-RAN; cat")
    (workdir / ".gitattributes").write_text("* filter=fx\n")
    os.utime(workdir / "a.txt", (978307200, 978307200))  # 2001: the index's stat is stale
    openai.script("MARK-CODEX", [{"text": "nothing to do"}])
    events = await collect_codex(
        CodexExecutor(codex_bin, codex_env), sandboxed("MARK-CODEX go", workdir)
    )
    assert isinstance(events[-1], TurnFinished) and not events[-1].is_error
    assert not (workdir / "CLEAN-RAN").exists()
    subprocess.run(["git", "-C", str(workdir), "status"], env=_clean_env(), capture_output=True)
    assert (workdir / "CLEAN-RAN").exists()  # the plant was live


@pytest.fixture
def chat() -> object:
    mock = ChatMock().start()
    yield mock
    mock.stop()


async def test_a_sandboxed_local_turn_plants_a_repository_and_the_card_runs_nothing(
    tmp_path, claude_bin, agent_env, workdir, chat
):
    """/local's write_file refuses .git; its sandboxed ``run`` (bubblewrap, the directory
    writable) may still make a repository and plant it: the card's git runs none of it."""
    plant_config = {"path": ".git/config", "content": "[core]\n\tfsmonitor = touch WRITTEN-RAN\n"}
    chat.script(
        "MARK-LOCAL-PLANT",
        [
            {"tools": [{"name": "write_file", "args": plant_config}]},
            {
                "tools": [
                    {
                        "name": "run",
                        "args": {
                            "command": "git init -q && git config core.fsmonitor "
                            "'touch FSMONITOR-RAN; echo' && echo x > work.txt"
                        },
                    }
                ]
            },
            {"text": "planted locally"},
        ],
    )
    async with FakeTelegram() as fake:
        settings = make_settings(
            tmp_path / "data", fake, claude_bin, workdir, local_base_url=chat.base_url
        )
        async with running_bot(settings, agent_env):
            await fake.user_message("/detach engine=local MARK-LOCAL-PLANT go", OWNER)
            card = await fake.wait_text(OWNER, "planted locally", timeout_s=60)
    results = [m["content"] for m in chat.requests_for("MARK-LOCAL-PLANT")[-1]["messages"]]
    assert any("in .git, the repository's own data" in str(r) for r in results)
    assert not (workdir / "FSMONITOR-RAN").exists() and not (workdir / "WRITTEN-RAN").exists()
    config = workdir / ".git" / "config"
    if config.exists() and "FSMONITOR-RAN" in config.read_text():  # the sandbox let it plant
        assert "work.txt" in card.params["text"]
        subprocess.run(["git", "-C", str(workdir), "status"], env=_clean_env(), capture_output=True)
        assert (workdir / "FSMONITOR-RAN").exists()  # it was live
