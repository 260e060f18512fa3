"""From the card to a pull request, with real git, the real claude CLI against a scripted model
and a scripted GitHub REST server on 127.0.0.1: Push sends the task's branch to a local bare
remote and nothing planted runs (the remote's hooks, a URL rewrite in the repository's
configuration); Open PR sends the goal, the check's result, the cost and draft; the card follows
the PR's checks and its merge, edited in place; a follow-up's push goes to the same PR; each
refusal is one line."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from bot.errors import UserInputError
from bot.models import TaskStatus
from bot.prs.push import Pusher
from bot.prs.remote import Remote, github_slug, scheme_of, shown
from bot.telegram.callbacks import TaskAction
from tests.support.fake_github import FakeGitHub
from tests.support.harness import OWNER, app_in_own_task, wait_sent
from tests.support.recording_session import RecordingSession
from tests.test_handlers import feed, message, press
from tests.test_worktrees import bot_settings, make_repo, sh_git

HOOKS = ("pre-receive", "update", "post-receive", "post-update", "reference-transaction")
TOKEN = "ghp_testtoken0123456789abcdef"


def bare_with_hooks(path: Path, fired: Path) -> Path:
    """A bare repository whose every receiving hook leaves a mark in ``fired``."""
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True, timeout=30)
    for hook in HOOKS:
        script = path / "hooks" / hook
        script.write_text(f"#!/bin/sh\necho {hook} >> {fired}\n")
        script.chmod(0o755)
    return path


def branches(bare: Path) -> dict[str, str]:
    out = sh_git(bare, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads")
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


async def test_a_push_reads_no_repository_config_and_runs_no_remote_hook(tmp_path):
    """The pusher alone: the repository rewrites the remote's URL (``insteadOf`` and
    ``pushInsteadOf``) and the remote has hooks; a plain ``git push`` obeys both (shown
    first), the bot's goes to the URL it was given and runs neither."""
    repo = make_repo(tmp_path / "repo")
    fired = tmp_path / "fired"
    remote = bare_with_hooks(tmp_path / "remote.git", fired)
    evil = bare_with_hooks(tmp_path / "evil.git", tmp_path / "evil-fired")
    sh_git(repo, "config", f"url.{evil}.insteadOf", str(remote))
    sh_git(repo, "config", f"url.{evil}.pushInsteadOf", str(remote))
    commit = sh_git(repo, "rev-parse", "HEAD")
    sh_git(repo, "push", "-q", str(remote), "HEAD:refs/heads/plain")  # what a plain push does
    assert "plain" in branches(evil) and not branches(remote)
    assert (tmp_path / "evil-fired").exists()
    (tmp_path / "evil-fired").unlink()

    pusher = Pusher(os.environ, 30)
    pushed = await pusher.push(
        repo / ".git", Remote("origin", str(remote), "file", None), commit, "detach/1-x"
    )
    assert pushed.ref == "refs/heads/detach/1-x"
    assert branches(remote) == {"detach/1-x": commit}
    assert set(branches(evil)) == {"plain"} and not (tmp_path / "evil-fired").exists()
    assert not fired.exists(), fired.read_text()


async def test_a_remote_on_another_protocol_is_not_reached(tmp_path):
    """GIT_ALLOW_PROTOCOL is the URL's own scheme: a rewrite to ext:: (say, in the owner's
    own configuration) would be refused by git, not run."""
    repo = make_repo(tmp_path / "repo")
    commit = sh_git(repo, "rev-parse", "HEAD")
    home = tmp_path / "home"
    home.mkdir()
    mark = tmp_path / "ext-ran"
    (home / ".gitconfig").write_text(
        f'[url "ext::sh -c touch% {mark}"]\n\tinsteadOf = {tmp_path}/remote.git\n'
    )
    pusher = Pusher({**os.environ, "HOME": str(home)}, 30)
    with pytest.raises(UserInputError) as refused:
        await pusher.push(
            repo / ".git",
            Remote("origin", f"{tmp_path}/remote.git", "file", None),
            commit,
            "detach/1-x",
        )
    assert refused.value.key == "pr.rejected" and "not allowed" in refused.value.params["reason"]
    assert not mark.exists()


def test_remote_urls():
    assert scheme_of("/srv/git/repo.git") == "file"
    assert scheme_of("https://github.com/o/r.git") == "https"
    assert scheme_of("git@github.com:o/r.git") == "ssh"
    assert scheme_of("ssh://git@github.com/o/r.git") == "ssh"
    for hostile in ("ext::sh -c touch x", "fd::3", "--upload-pack=x", "foo://x"):
        assert scheme_of(hostile) is None, hostile
    for url in ("https://github.com/o/r.git", "git@github.com:o/r.git", "ssh://git@github.com/o/r"):
        assert github_slug(url, "github.com") == "o/r", url
    assert github_slug("https://gitlab.com/o/r.git", "github.com") is None
    assert github_slug("git@ghe.corp:team/app.git", "ghe.corp") == "team/app"
    assert shown("https://me:ghp_secret@github.com/o/r.git") == "https://github.com/o/r.git"
    assert shown("git@github.com:o/r.git") == "git@github.com:o/r.git"


@pytest.fixture
async def github() -> AsyncIterator[FakeGitHub]:
    server = await FakeGitHub().start()
    yield server
    await server.stop()


def pr_settings(tmp_path: Path, claude_bin: str, workdir: Path, github: FakeGitHub, **more: Any):
    settings = bot_settings(tmp_path, claude_bin, workdir, worktrees=False)
    return settings.model_copy(
        update={
            "github_api_url": github.url,
            "github_repo": "octo/app",
            "gh_bin": str(tmp_path / "no-gh"),
            "pr_poll_s": 0.3,
            **more,
        }
    )


def writes(anthropic, marker: str, *files: tuple[str, str]) -> None:
    """The script of a task whose turns (the first, then each follow-up: a script is found by
    the first prompt) write one file each."""
    steps: list[dict[str, Any]] = []
    for name, content in files:
        write = {"name": "Write", "input": {"file_path": name, "content": content}}
        steps += [{"tool_use": write}, {"text": f"Wrote {name}."}]
    anthropic.script(marker, steps)


async def settled(app, task_id: int) -> None:
    async with asyncio.timeout(60):
        while (await app.store.tasks.get(task_id)).status.active:
            await asyncio.sleep(0.1)


async def edited(session: RecordingSession, part: str, timeout_s: float = 15) -> Any:
    """The first edit since the session's mark whose text holds ``part``."""
    async with asyncio.timeout(timeout_s):
        while True:
            for call in session.calls[session.mark :]:
                if type(call).__name__ == "EditMessageText" and part in (call.text or ""):
                    return call
            await asyncio.sleep(0.05)


async def test_push_then_a_follow_up_push_to_a_bare_remote(
    tmp_path, claude_bin, agent_env, anthropic, workdir, monkeypatch
):
    """The branch arrives with what the agent left (committed for it), the remote's hooks do
    not run, the card says where it went; a follow-up's commits go to the same branch; a
    URL rewrite planted in the repository's configuration stops the bot's git there (one
    line), and nothing reaches the rewritten address."""
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    repo = make_repo(workdir / "repo")
    fired = tmp_path / "fired"
    remote = bare_with_hooks(tmp_path / "remote.git", fired)
    sh_git(repo, "remote", "add", "origin", str(remote))
    writes(anthropic, "MARK-PUSH", ("NOTES.md", "written by the agent\n"), ("MORE.md", "more\n"))
    github = FakeGitHub()  # not started: Push needs no GitHub
    settings = pr_settings(tmp_path, claude_bin, workdir, github)
    async with app_in_own_task(settings, session=RecordingSession(), environ=agent_env) as app:
        await feed(app, message("/claude worktree=yes mode=auto cwd=repo MARK-PUSH go"))
        await settled(app, 1)
        push = TaskAction(action="push", task_id=1).pack()
        await wait_sent(app.bot.session, lambda c: push in str(c.reply_markup))
        session = await feed(app, press(push))
        line = await edited(session, "Pushed to")
        branch = (await app.store.worktrees.get(1)).branch
        assert f"Pushed to <code>origin</code> ({remote}) as <code>{branch}</code>" in line.text
        tip = branches(remote)
        assert list(tip) == [branch]
        shown = sh_git(remote, "show", "--stat", "--format=%s", next(iter(tip.values())))
        assert "NOTES.md" in shown
        assert not fired.exists(), fired.read_text()

        replied_to = await app.store.outbox.message_id_of(
            (await app.store.outbox.newest_send(1, "result")).id
        )
        await feed(app, message("now more", reply_to=replied_to))
        await settled(app, 1)
        session = await feed(app, press(push))
        await edited(session, "Pushed to")
        after = branches(remote)
        assert list(after) == list(tip) and after != tip
        assert sh_git(remote, "merge-base", "--is-ancestor", *tip.values(), *after.values()) == ""
        assert not fired.exists()

        evil = bare_with_hooks(tmp_path / "evil.git", tmp_path / "evil-fired")
        sh_git(repo, "config", f"url.{evil}.pushInsteadOf", str(remote))
        (Path((await app.store.tasks.get(1)).cwd) / "LAST.md").write_text("last\n")
        session = await feed(app, press(push))
        assert "URL rewrite in its own configuration" in session.new_texts()
        assert not branches(evil) and branches(remote) == after
        assert not (tmp_path / "evil-fired").exists()
        assert (await app.store.tasks.get(1)).status is TaskStatus.DONE


async def test_open_pr_follow_its_checks_and_merge_and_push_to_it_again(
    tmp_path, claude_bin, agent_env, anthropic, workdir, github, monkeypatch
):
    """Open PR pushes and opens a draft with the goal, the check's result and the cost; the
    card's PR line follows its checks (a failure also said in a line of its own, as asked) and
    its merge, edited in place; a follow-up's push goes to the same PR, not a new one; a branch
    that already has a PR gets it linked."""
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    repo = make_repo(workdir / "repo")
    remote = bare_with_hooks(tmp_path / "remote.git", tmp_path / "fired")
    sh_git(repo, "remote", "add", "origin", str(remote))
    writes(anthropic, "MARK-PR", ("NOTES.md", "notes\n"), ("MORE.md", "more\n"))
    writes(anthropic, "MARK-TWO", ("TWO.md", "two\n"))
    settings = pr_settings(
        tmp_path, claude_bin, workdir, github, github_token=SecretStr(TOKEN), pr_notify_failed=True
    )
    async with app_in_own_task(settings, session=RecordingSession(), environ=agent_env) as app:
        await feed(
            app,
            message("/claude worktree=yes mode=auto cwd=repo check=“test -f NOTES.md” MARK-PR go"),
        )
        await settled(app, 1)
        task = await app.store.tasks.get(1)
        opening = TaskAction(action="open_pr", task_id=1).pack()
        await wait_sent(app.bot.session, lambda c: opening in str(c.reply_markup))
        session = await feed(app, press(opening))
        line = await edited(session, "PR #7")
        assert 'href="https://github.example/octo/app/pull/7"' in line.text
        assert "open · checks: none yet" in line.text and "Pushed to" in line.text
        (created,) = github.of("POST")
        sent = created["body"]
        branch = (await app.store.worktrees.get(1)).branch
        assert (sent["title"], sent["head"], sent["base"], sent["draft"]) == (
            task.title,
            branch,
            "main",
            True,
        )
        assert sent["body"].startswith("MARK-PR go")
        assert "**Check:** `test -f NOTES.md` passed" in sent["body"]
        assert f"**Cost:** ${task.total_cost_usd:.4f}" in sent["body"] and task.total_cost_usd > 0
        assert "**Engine:** claude" in sent["body"]
        assert created["auth"] == f"Bearer {TOKEN}"
        assert list(branches(remote)) == [branch]

        github.runs = [{"status": "in_progress", "conclusion": None}]
        await edited(session, "checks: ⏳ running")
        github.runs = [{"status": "completed", "conclusion": "failure"}]
        await edited(session, "checks: ❌ failed")
        failed = await wait_sent(session, lambda c: "A check of" in c.text)
        assert "PR #7" in failed.text

        elsewhere = bare_with_hooks(tmp_path / "elsewhere.git", tmp_path / "fired")
        sh_git(repo, "remote", "set-url", "origin", str(elsewhere))  # an agent's, say
        session = await feed(app, press(TaskAction(action="push", task_id=1).pack()))
        said = one_line(session, "Not pushed")
        assert f"changed since its PR was opened (was <code>{remote}</code>" in said
        assert not branches(elsewhere)
        sh_git(repo, "remote", "set-url", "origin", str(remote))

        replied_to = await app.store.outbox.message_id_of(
            (await app.store.outbox.newest_send(1, "result")).id
        )
        before = branches(remote)
        await feed(app, message("now more", reply_to=replied_to))
        await settled(app, 1)
        session = await feed(app, press(opening))  # Open PR again: the same PR
        await edited(session, "New commits pushed to")
        assert branches(remote) != before and len(github.of("POST")) == 1
        head = branches(remote)[branch]
        github.pulls[7]["head"]["sha"] = head  # GitHub's PR follows its branch

        github.runs = [{"status": "completed", "conclusion": "success"}]
        await edited(session, "checks: ✅ passed")
        assert github.of("GET", f"/commits/{head}/check-runs")
        github.pulls[7] |= {"state": "closed", "merged": True}
        merged = await edited(session, "· merged ·")
        assert merged.text.count("🔗") == 1  # one PR line, edited, never a second
        assert (await app.store.prs.get(1)).state == "merged"
        listed = await feed(app, message("/prs"))
        assert "No open pull request" in listed.new_texts()
        asked = await feed(app, press(TaskAction(action="discard", task_id=1).pack()))
        assert "Discard it anyway?" in asked.new_texts()  # its branch lives on remotely
        assert 'pull request <a href="https://github.example/octo/app/pull/7">#7</a>' in (
            asked.new_texts()
        )  # and the question names the PR that stays
        assert (await app.store.worktrees.get(1)).state == "active"
        news = [c.text for c in session.sent() if "PR #7" in c.text]
        assert news == [failed.text]  # the PR line only ever edited; one buzz: the failure

        github.pulls[30] = {
            "number": 30,
            "html_url": "https://github.example/octo/app/pull/30",
            "state": "open",
            "merged": False,
            "head": {"ref": "detach/2-mark-two", "sha": "1" * 40},
        }
        await feed(app, message("/claude worktree=yes mode=auto cwd=repo MARK-TWO"))
        await settled(app, 2)
        session = await feed(app, press(TaskAction(action="open_pr", task_id=2).pack()))
        assert "already open for this branch" in session.new_texts()
        assert "pull/30" in session.new_texts()
        assert (await app.store.prs.get(2)).number == 30
        listed = (await feed(app, message("/prs"))).new_texts()
        assert "Open pull requests" in listed and "#2 mark-two" in listed and "PR #30" in listed
        assert "PR #7" not in listed  # merged: no longer open


def one_line(session: RecordingSession, part: str) -> str:
    """The one message since the mark that holds ``part``, and it is one line."""
    (said,) = [t for t in session.new_texts().split("\n---\n") if part in t]
    assert "\n" not in said, said
    return said


async def test_each_refusal_is_one_line_that_says_what_to_do(
    tmp_path, claude_bin, agent_env, anthropic, workdir, github, monkeypatch
):
    """No remote; a remote that is not GitHub (Push only); a push the remote rejects (with
    git's reason); no GitHub login. Each one line in the chat, the card's toast says so."""
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    lone = make_repo(workdir / "lone")
    repo = make_repo(workdir / "repo")
    remote = bare_with_hooks(tmp_path / "remote.git", tmp_path / "fired")
    sh_git(repo, "remote", "add", "origin", str(remote))
    writes(anthropic, "MARK-LONE", ("A.md", "a\n"))
    writes(anthropic, "MARK-OFF", ("B.md", "b\n"))
    settings = pr_settings(tmp_path, claude_bin, workdir, github, github_repo="")
    async with app_in_own_task(settings, session=RecordingSession(), environ=agent_env) as app:
        await feed(app, message("/claude worktree=yes mode=auto cwd=lone MARK-LONE"))
        await feed(app, message("/claude worktree=yes mode=auto cwd=repo MARK-OFF"))
        await settled(app, 1)
        await settled(app, 2)
        push_2 = TaskAction(action="push", task_id=2).pack()
        card = await wait_sent(app.bot.session, lambda c: push_2 in str(c.reply_markup))
        assert TaskAction(action="open_pr", task_id=2).pack() not in str(card.reply_markup)

        session = await feed(app, press(TaskAction(action="push", task_id=1).pack()))
        said = one_line(session, "Not pushed")
        assert "has no remote <code>origin</code>" in said and "DETACH_PR_REMOTE" in said
        assert "Not pushed" in session.sent("AnswerCallbackQuery")[-1].text
        assert sh_git(lone, "remote") == ""

        session = await feed(app, press(TaskAction(action="open_pr", task_id=2).pack()))
        assert "is not on GitHub: ⬆️ Push only" in session.new_texts()
        assert not github.requests and len(branches(remote)) == 1  # pushed all the same

        branch = (await app.store.worktrees.get(2)).branch
        other = tmp_path / "other"
        sh_git(tmp_path, "clone", "-q", str(remote), str(other))
        sh_git(other, "checkout", "-q", branch)
        (other / "THEIRS.md").write_text("someone else\n")
        sh_git(other, "add", "-A")
        sh_git(other, "commit", "-qm", "theirs")
        sh_git(other, "push", "-q", "origin", branch)
        (Path((await app.store.tasks.get(2)).cwd) / "MINE.md").write_text("mine\n")
        session = await feed(app, press(TaskAction(action="push", task_id=2).pack()))
        said = one_line(session, "Not pushed")
        assert "<code>origin</code> rejected it:" in said and "fetch first" in said, said

    unlogged = pr_settings(tmp_path, claude_bin, workdir, github, github_repo="octo/app")
    async with app_in_own_task(unlogged, session=RecordingSession(), environ=agent_env) as app:
        (Path((await app.store.tasks.get(2)).cwd) / "MINE.md").write_text("mine again\n")
        sh_git(
            Path((await app.store.tasks.get(2)).cwd), "pull", "-q", "--no-rebase", "origin", branch
        )
        session = await feed(app, press(TaskAction(action="open_pr", task_id=2).pack()))
        assert "no GitHub login. Run <code>gh auth login</code>" in session.new_texts()
        assert not github.requests


async def test_github_refusals_become_their_lines(tmp_path, github):
    """A 401 is no login; a protected branch's rejection is said as such."""
    from bot.prs.github import GitHub, NewPull
    from bot.prs.push import _refusal

    async def token() -> str:
        return "expired-token-value"

    github.token = "the-right-token-value"
    with pytest.raises(UserInputError) as refused:
        await GitHub(github.url, token).open(NewPull("o/r", "b", "main", "t", "b", True))
    assert refused.value.key == "pr.no_login"
    github.token = ""
    with pytest.raises(UserInputError) as refused:
        await GitHub(github.url + "/proxy", token).pull("o/r", 1)
    assert refused.value.params == {"status": "404", "reason": "404: Not Found"}
    remote = Remote("origin", "https://github.com/o/r.git", "https", "o/r")
    output = (
        "To https://github.com/o/r.git\n!\trefs/heads/x:refs/heads/main\t[remote rejected] "
        "(protected branch hook declined)\nDone\nerror: failed to push some refs\n"
    )
    assert _refusal(remote, output).key == "pr.protected"
    login = "fatal: Authentication failed for 'https://github.com/o/r.git/'\n"
    assert _refusal(remote, login).key == "pr.no_login_push"
    forbidden = (
        "remote: Permission to o/r.git denied.\n"
        "fatal: unable to access: The requested URL returned error: 403\n"
    )
    assert _refusal(remote, forbidden).key == "pr.no_login_push"
    # a rejected ref whose ids hold "403" is a rejection (it failed once so, by chance)
    behind = (
        "To /tmp/pytest-403/remote.git\n!\t4031ab2:refs/heads/x\t[rejected] (fetch first)\n"
        "error: failed to push some refs to '/tmp/pytest-403/remote.git'\n"
    )
    assert _refusal(remote, behind).key == "pr.rejected"


async def test_the_mcp_pr_tool_reads_a_tasks_pull_request(tmp_path):
    """``pr`` in ``detach mcp``: the PR the card follows, or null; another owner's task is
    no task (pushing and opening stay with the owner)."""
    import json

    from bot.store.prs import ChecksState, PrRow
    from tests.test_mcp import desk_client, refused

    async with desk_client(tmp_path) as (client, store, _):
        none = json.loads((await client.call_tool("pr", {"task_id": 1})).content[0].text)
        assert none["pr"] is None and none["task_id"] == 1
        url = "https://github.example/octo/app/pull/7"
        await store.prs.put(PrRow(1, "octo/app", 7, url, "a" * 40, checks=ChecksState.PENDING))
        found = json.loads((await client.call_tool("pr", {"task_id": 1})).content[0].text)
        assert found["pr"] == {
            "number": 7,
            "url": url,
            "state": "open",
            "checks": "pending",
            "head": "a" * 40,
        }
        assert "no task #2" in await refused(client, "pr", {"task_id": 2})


async def test_the_boards_task_page_pushes_and_opens_the_pr(tmp_path, workdir, github, monkeypatch):
    """The board's Push and Open PR act through the same use case as the card's buttons, and
    its task page shows the PR."""
    from tests.test_afterlife import agent
    from tests.test_board import bot_with_board, signed_in, wait_status

    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    repo = make_repo(workdir / "repo")
    remote = bare_with_hooks(tmp_path / "remote.git", tmp_path / "fired")
    sh_git(repo, "remote", "add", "origin", str(remote))
    more = {
        "github_api_url": github.url,
        "github_repo": "octo/app",
        "github_token": TOKEN,
        "gh_bin": str(tmp_path / "no-gh"),
        "pr_poll_s": 30,
    }
    async with bot_with_board(tmp_path, workdir, agent(), **more) as (app, board):
        await feed(app, message("/claude worktree=yes cwd=repo write it"))
        await wait_status(app, 1, TaskStatus.DONE)
        http, csrf = await signed_in(app, board)
        url, headers = f"{board.url}/api/tasks/1", {"X-CSRF-Token": csrf}
        async with http:
            async with http.post(f"{url}/push", headers=headers) as response:
                assert await response.json() == {"ok": True, "text": "Pushed."}
            assert list(branches(remote)) == [(await app.store.worktrees.get(1)).branch]
            async with http.post(f"{url}/open_pr", headers=headers) as response:
                assert await response.json() == {"ok": True, "text": "Pull request ready."}
            async with http.get(url) as response:
                page = await response.json()
            assert page["pr"] == {
                "number": 7,
                "url": "https://github.example/octo/app/pull/7",
                "state": "open",
                "checks": "none",
                "state_text": "open",  # the card's words, in the owner's language
                "checks_text": "none yet",
            }
            await app.store.users.set_locale(OWNER, "ru")  # /lang ru: the board speaks it too
            async with http.get(url) as response:
                shown = (await response.json())["pr"]
            assert (shown["state_text"], shown["checks_text"]) == ("открыт", "пока нет")
            assert not (tmp_path / "fired").exists()


async def test_the_gh_login_is_asked_first_and_its_token_is_hidden_everywhere(
    tmp_path, workdir, github, monkeypatch
):
    """``gh auth token`` (a script standing for gh here) comes before GITHUB_TOKEN; what it
    gives is in no stored or sent text, as the bot's own token."""
    from tests.test_afterlife import agent
    from tests.test_board import bot_with_board, wait_status

    gh_said = "gho_fromthegh0123456789"
    gh = tmp_path / "gh"
    gh.write_text(f'#!/bin/sh\n[ "$1 $2" = "auth token" ] && echo {gh_said}\n')
    gh.chmod(0o755)
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_fromtheenvironment0123")
    repo = make_repo(workdir / "repo")
    sh_git(
        repo, "remote", "add", "origin", str(bare_with_hooks(tmp_path / "r.git", tmp_path / "f"))
    )
    more = {"github_api_url": github.url, "github_repo": "octo/app", "gh_bin": str(gh)}
    async with bot_with_board(tmp_path, workdir, agent(), **more) as (app, _board):
        await feed(app, message("/claude worktree=yes cwd=repo write it"))
        await wait_status(app, 1, TaskStatus.DONE)
        await feed(app, press(TaskAction(action="open_pr", task_id=1).pack()))
        assert github.of("POST")[0]["auth"] == f"Bearer {gh_said}"
        assert app.store.redact(f"the token is {gh_said}") == "the token is [redacted]"


async def test_the_pr_body_links_the_public_board_in_the_tasks_language(tmp_path):
    """The body links the board's page of the task when the board is public, and speaks the
    task's language (Markdown for GitHub: nothing escaped as HTML)."""
    from bot.models import NewTask, TaskKind
    from bot.prs import body
    from bot.store import Store
    from bot.telegram.texts import Texts

    store = await Store.open(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    try:
        new = NewTask(1, 1, "claude", TaskKind.DETACH, "fix <b> & a < b", tmp_path, locale="ru")
        task, _ = await store.tasks.create(new, "fix <b> & a < b")
        said = await body.body(store, Texts(), task, "https://board.example")
        assert said.startswith("fix <b> & a < b\n")
        assert "**Задача:** https://board.example/tasks/1" in said
        assert "**Проверка:** нет" in said and "**Стоимость:** $0.0000" in said
        assert "board.example" not in await body.body(store, Texts(), task, None)
    finally:
        await store.close()
