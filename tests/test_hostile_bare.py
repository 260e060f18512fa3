"""A sandboxed agent plants a *bare repository layout* straight in its task's directory (``HEAD``,
``config``, ``objects/``, ``refs/`` at the top: ordinary files there, no ``.git``), whose
configuration names programs; at the next turn's start the claude CLI runs git in that
directory, outside any sandbox, and git finds the planted layout by itself (a directory that
looks like a git directory is a bare repository to git, unless ``safe.bareRepository`` is
``explicit``). Measured with Claude Code 2.1.197 and git 2.39.5:

- in a plain directory (no ``.git`` there or above: Detach's ``gitscope.marked_top`` finds
  none, so the CLI's environment got nothing) the CLI still runs ``git ls-files
  --error-unmatch -- :(icase).claude/settings.local.json`` at each start; with a planted
  work tree (``core.worktree``), a sparse index whose directory entry's tree is missing and a
  promisor remote, that command fetches the tree lazily, and the fetch runs the planted
  ``remote.origin.uploadpack`` as the owner;
- in a sub-directory of a checkout (``marked_top`` finds the checkout's ``.git`` above) the
  CLI runs ``git status --short`` and ``git log`` there, and git takes the layout planted in
  the sub-directory before the ``.git`` above: ``status`` ran a planted clean filter (and
  ``log`` a planted ``gpg.program`` with ``log.showSignature``).

Codex 0.171.0 runs no git in a plain directory and passes ``-c safe.bareRepository=explicit``
to its own git: neither plant ran there. Each plant writes its marker in ``$HOME``; the second
turn runs no tool, so a marker then is the CLI's own start-up git. Measured: with
``safe.bareRepository=explicit`` in the CLI's environment (``GIT_CONFIG_COUNT``), in every mode
and outside a repository too, git finds no repository there and neither plant runs. A control
shows each plant is live with a plain git."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bot.events import SessionStarted, TurnFinished
from bot.models import ApprovalMode, TurnSpec
from executors.claude import ClaudeExecutor
from executors.gitscope import FIXED, OUTSIDE, Scope, under
from tests.test_claude_executor import Scripted, collect

CLAUDE = os.environ.get("DETACH_TEST_CLAUDE_BIN") or str(
    Path(__file__).resolve().parents[1] / "agents/node_modules/.bin/claude"
)
pytestmark = pytest.mark.skipif(not Path(CLAUDE).exists(), reason="pinned claude CLI missing")

# Claude's sandbox knows the trick: a HEAD, objects or refs a sandboxed command creates at the
# top is scrubbed after it (and, once all three exist, config and hooks are not writable). The
# agent plants in that order instead: its script (Write, then Bash, sandboxed) makes the
# configuration and an index, built in a scratch repository that it then removes; then the
# file tool (Write, acceptEdits) makes HEAD, objects/ and refs/, which no sandbox scrubs.
SCRATCH = "set -e\ngit init -q -b main s\ncd s\n"
# a sparse index whose far/ entry's tree exists nowhere once s/ is gone, and a promisor remote:
# any git reading the whole index fetches that tree, and the fetch runs the remote's upload-pack
PROMISOR = SCRATCH + (
    "mkdir keep far && echo a > keep/a.txt && echo b > far/b.txt && git add keep far\n"
    "git config core.sparseCheckout true && git config core.sparseCheckoutCone true\n"
    "git config index.sparse true && printf '/*\\n!/*/\\n/keep/\\n' > .git/info/sparse-checkout\n"
    "git -c user.name=a -c user.email=a@a commit -qm one && git sparse-checkout reapply\n"
    "cd .. && cp s/.git/index index && rm -rf s\n"
    "cat > config <<'EOF'\n"
    "[core]\n\trepositoryformatversion = 1\n\tbare = false\n\tworktree = .\n"
    "\tsparseCheckout = true\n\tsparseCheckoutCone = true\n[index]\n\tsparse = true\n"
    "[extensions]\n\tpartialClone = origin\n"
    '[remote "origin"]\n\turl = elsewhere\n\tpromisor = true\n'
    "\tuploadpack = touch $HOME/BARE-RAN && false\nEOF\n"
)
# a tracked file whose stat changed, a clean filter on every file
FILTER = SCRATCH + (
    "echo x > a.txt && git add a.txt && cd .. && cp s/.git/index index && cp s/a.txt a.txt\n"
    "rm -rf s && touch -d 2001-01-01 a.txt && mkdir -p info\n"
    "printf '* filter=fx\\n' > info/attributes\n"
    "cat > config <<'EOF'\n"
    "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
    '[filter "fx"]\n\tclean = touch $HOME/BARE-RAN && cat\nEOF\n'
)
CONTROL = {  # what the CLI itself ran there (measured, strace), here by a plain git
    "plain directory": ("ls-files", "--error-unmatch", "--", ":(icase).claude/settings.local.json"),
    "checkout's sub-directory": ("status", "--short"),
}


def write(path: Path, content: str) -> dict:
    return {"tool_use": {"name": "Write", "input": {"file_path": str(path), "content": content}}}


def planting(cwd: Path, script: str) -> list[dict]:
    """The agent's steps: write its script, run it (sandboxed), make the three git marks."""
    run = {"name": "Bash", "input": {"command": "sh plant.sh && echo PLANTED", "description": "d"}}
    marks = [("HEAD", "ref: refs/heads/main\n"), ("refs/.keep", ""), ("objects/.keep", "")]
    return [
        write(cwd / "plant.sh", script),
        {"tool_use": run},
        *(write(cwd / name, content) for name, content in marks),
        {"text": "planted"},
    ]


def sandboxed(prompt: str, cwd: Path, resume: str | None = None) -> TurnSpec:
    return TurnSpec(1, 1, prompt, cwd, resume_session_id=resume, approval_mode=ApprovalMode.SANDBOX)


def plain_git(cwd: Path, *args: str, home: Path) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(
        ["git", "-C", str(cwd), *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("where", ["plain directory", "checkout's sub-directory"])
async def test_claudes_start_up_git_runs_nothing_of_a_planted_bare_layout(
    agent_env, anthropic, workdir, where
):
    home = Path(agent_env["HOME"])
    cwd = workdir
    if where == "checkout's sub-directory":  # the task's directory is inside a clean checkout
        for args in (("init", "-q", "-b", "main"), ("commit", "-q", "--allow-empty", "-m", "o")):
            ran = plain_git(workdir, "-c", "user.name=o", "-c", "user.email=o@o", *args, home=home)
            assert ran.returncode == 0, ran.stderr
        cwd = workdir / "sub"
        cwd.mkdir()
    mark = f"MARK-BARE-{len(where)}"
    plant = PROMISOR if where == "plain directory" else FILTER
    anthropic.script(mark, [*planting(cwd, plant), {"text": "again"}])
    claude = ClaudeExecutor(CLAUDE, agent_env)
    approver = Scripted()
    first = await collect(claude, sandboxed(f"{mark} go", cwd), approver)
    assert approver.requests == []  # planted with no approval
    assert isinstance(first[-1], TurnFinished) and first[-1].result_text == "planted"
    assert (cwd / "HEAD").is_file() and "BARE-RAN" in (cwd / "config").read_text()  # made
    assert not (home / "BARE-RAN").exists()  # the sandbox let no planting command write there
    session = next(e.session_id for e in first if isinstance(e, SessionStarted))
    second = await collect(claude, sandboxed("more", cwd, resume=session), Scripted())
    assert isinstance(second[-1], TurnFinished) and second[-1].result_text == "again"
    assert not (home / "BARE-RAN").exists()  # the CLI's own git at its start ran nothing
    plain_git(cwd, *CONTROL[where], home=home)
    assert (home / "BARE-RAN").exists()  # the plant was live: a plain git there runs it


@pytest.mark.parametrize("sandboxed", [True, False])
@pytest.mark.parametrize("refusal", [None, "refused"])
def test_every_agent_cli_env_says_a_bare_layout_is_no_repository(sandboxed, refusal):
    """Every mode, in a repository the bot reads or refuses (a layout planted in a checkout's
    sub-directory makes the bot's own listing fail there: refused) and outside one."""
    env = Scope(FIXED, refusal).cli_env(sandboxed)
    for found in (env, OUTSIDE):
        pairs = {
            found[f"GIT_CONFIG_KEY_{n}"]: found[f"GIT_CONFIG_VALUE_{n}"]
            for n in range(int(found["GIT_CONFIG_COUNT"]))
        }
        assert pairs["safe.bareRepository"] == "explicit"


def test_the_owners_own_git_config_env_is_kept_under_ours():
    """An owner's ``GIT_CONFIG_*`` (a container's ``safe.directory``, say) reach the agent's
    CLI with ours numbered after them, so ours win where both set a key; a set git could not
    read is replaced, as before."""
    owner = {
        "PATH": "/usr/bin",
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": "*",
        "GIT_CONFIG_KEY_1": "safe.bareRepository",
        "GIT_CONFIG_VALUE_1": "all",
    }
    env = under(owner, {**Scope(FIXED, "refused").cli_env(True), "GIT_ALLOW_PROTOCOL": ""})
    count = int(env["GIT_CONFIG_COUNT"])
    pairs = [(env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"]) for n in range(count)]
    assert pairs[:2] == [("safe.directory", "*"), ("safe.bareRepository", "all")]
    assert pairs[-1] == ("safe.bareRepository", "explicit") and ("core.fsmonitor", "false") in pairs
    assert env["PATH"] == "/usr/bin" and env["GIT_ALLOW_PROTOCOL"] == ""
    ran = subprocess.run(  # git reads them so: the last of a key wins
        ["git", "config", "--get", "safe.bareRepository"],
        env={**env, "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1"},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ran.stdout.strip() == "explicit", ran.stderr
    broken = {**owner, "GIT_CONFIG_COUNT": "3"}  # no key 2: git would refuse the whole set
    assert under(broken, OUTSIDE) == {"PATH": "/usr/bin", **OUTSIDE}
    assert under(owner, {}) == owner  # nothing of ours: the owner's as they are
