"""Git where an agent may have written (a task's directory, its worktree, a ``.git`` the agent
made): nothing from the repository's own configuration that runs a program is followed. The
bot's own git (``git`` here: worktrees, the completion card's diff) also gets a minimal
environment (no bot secrets); an agent CLI that runs git itself in its directory (Claude Code
runs ``git status`` and ``git log`` at each start, outside its sandbox) gets the overrides in
its environment (``Scope.cli_env``).

How: the effective configuration is listed first (``git config --list --show-scope``: it runs
nothing, measured in tests/test_hostile_git.py), then the command runs with overrides passed as
``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` (a key is never re-parsed, so a
driver named ``a=b`` cannot smuggle a value): the fixed ones below (fsmonitor, hooks, pager,
editor, signing, transports, credential helpers, auto-gc), and for each driver the repository
defines (``filter.*.clean|smudge|process``, ``diff.*.command|textconv``, ``merge.*.driver``,
included files too) the owner's global value, or nothing. A ``core.worktree`` (the work tree
moved elsewhere) is refused, not followed. Callers that diff pass ``--no-ext-diff
--no-textconv``. One ``Scope`` may serve several commands in the same directory.

Complete for the commands the bot runs (``git help --config`` of 2.39 reviewed): the other keys
that name a program (difftool, mergetool, guitool, browser, man, sendemail,
``interactive.diffFilter``, ``pager.<cmd>``) belong to commands or terminals the bot never
uses; ``core.gitProxy``, ``remote.*.proxy`` and helpers need a transport, and none is allowed.
Left open: the configuration could change between the listing and the command (only a process
of the agent still running after its turn could do it).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_S = 60.0
PLAIN_DIFF = ("--no-color", "--no-ext-diff", "--no-textconv")  # what every diff of the bot passes
ENV = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_PAGER": "cat",
    "GIT_EDITOR": ":",
    "GIT_SEQUENCE_EDITOR": ":",
    "GIT_SSH_COMMAND": "false",
    "GIT_ASKPASS": "",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LC_ALL": "C",
}
FIXED: tuple[tuple[str, str], ...] = (
    ("core.fsmonitor", "false"),
    ("core.hooksPath", "/dev/null"),
    ("core.pager", "cat"),
    ("core.editor", ":"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("core.alternateRefsCommand", ""),
    ("diff.external", ""),  # empty: no external diff (measured)
    ("credential.helper", ""),  # empty: the list of helpers is reset
    ("protocol.allow", "never"),  # no transport: lazy fetches, remote helpers, ssh
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("merge.verifySignatures", "false"),
    ("log.showSignature", "false"),
    ("gpg.program", "gpg"),
    ("gpg.openpgp.program", "gpg"),
    ("gpg.x509.program", "gpgsm"),
    ("gpg.ssh.program", "ssh-keygen"),
    ("gpg.ssh.defaultKeyCommand", ""),
    ("submodule.recurse", "false"),
    ("safe.bareRepository", "explicit"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
)
# a driver's program, by the repository's choice of name; its value when no global one exists
DRIVERS = re.compile(
    r"(?P<kind>filter|diff|merge)\.(?P<name>.+)\.(?P<var>clean|smudge|process|command|textconv|driver)"
)
CLI_FIXED = {"core.fsmonitor", "diff.external"}  # of FIXED, what an agent CLI's env gets
NEUTRAL = {"driver": "false"}  # a merge driver that always fails: a conflict, never a program
OWNER_SCOPES = {"system", "global"}  # the rest is the repository's (local, worktree)
WORKTREE_MOVED = "core.worktree is set in this repository's configuration; not followed"
FOREIGN = "the .git here leads to another repository's git directory; not followed"


@dataclass(frozen=True, slots=True)
class Git:
    code: int
    out: str
    err: str


@dataclass(frozen=True, slots=True)
class Scope:
    """The overrides of one directory's git commands, or why git is not run there at all."""

    overrides: tuple[tuple[str, str], ...]
    refusal: str | None = None

    def env(self) -> dict[str, str]:
        """The whole environment of the bot's own git."""
        return {**ENV, "HOME": str(Path.home()), **_as_env(self.overrides)}

    def cli_env(self) -> dict[str, str]:
        """What an agent CLI's environment gets: only what its own start-up git (``status``,
        ``log``, no hooks) could run, so the agent's git in its sandbox otherwise works as the
        owner set it up (hooks, transports, signing)."""
        return _as_env([(k, v) for k, v in self.overrides if k in CLI_FIXED or _driver(k)])


def _as_env(overrides: list[tuple[str, str]] | tuple[tuple[str, str], ...]) -> dict[str, str]:
    """Overrides as git reads them from its environment."""
    env = {"GIT_CONFIG_COUNT": str(len(overrides))}
    for n, (key, value) in enumerate(overrides):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
    return env


def _driver(key: str) -> bool:
    """A driver's program, or whether its filter is required."""
    return DRIVERS.fullmatch(key) is not None or (
        key.startswith("filter.") and key.endswith(".required")
    )


BASE = Scope(FIXED)


async def scope(cwd: Path | str, timeout_s: float = GIT_TIMEOUT_S) -> Scope:
    """The overrides for git in ``cwd``: FIXED, plus each program-running driver key that the
    repository's own configuration (or a file it includes) defines."""
    args = ("config", "--list", "--show-scope", "--show-origin", "--null")
    try:
        listed = await _run(cwd, args, BASE, timeout_s)
    except OSError as exc:  # no git here: nothing of it will run either
        return Scope(FIXED, f"git cannot run: {exc}")
    if listed.code != 0:
        return Scope(FIXED, listed.err or "git cannot read this repository's configuration")
    top = _marked_top(Path(cwd))
    return from_listing(listed.out, top, _foreign(top) if top is not None else None)


def from_listing(listing: str, top: Path | None, foreign: str | None = None) -> Scope:
    """The Scope for the NUL-separated ``scope, origin, key\\nvalue`` entries of ``git config
    --list --show-scope --show-origin --null``: a driver key the repository set gets the owner's
    own (global) value back, or a neutral one; a filter left without a program is no longer
    required. ``top``: the work tree's top as its ``.git`` shows it; a ``core.worktree``
    naming any other directory is refused (a submodule's, naming its own top, is not).
    ``foreign``: why the git directory ``top/.git`` leads to is not ``top``'s own (refused
    unless the configuration there names ``top`` as its work tree, as a submodule's does)."""
    fields = listing.split("\0")
    entries = [
        (fields[i], fields[i + 1], *_key_value(fields[i + 2])) for i in range(0, len(fields) - 2, 3)
    ]
    owner = {key: value for where, _, key, value in entries if where in OWNER_SCOPES}
    planted = {
        key: found
        for where, _, key, _value in entries
        if where not in OWNER_SCOPES and (found := DRIVERS.fullmatch(key)) is not None
    }
    extra = [(key, owner.get(key, NEUTRAL.get(m["var"], ""))) for key, m in planted.items()]
    unowned = {m["name"] for key, m in planted.items() if m["kind"] == "filter"} - {
        m["name"] for key, m in planted.items() if key in owner
    }
    extra += [(f"filter.{name}.required", "false") for name in sorted(unowned)]
    named = [_named(origin, value) for _, origin, key, value in entries if key == "core.worktree"]
    refusal = WORKTREE_MOVED if any(path != top or top is None for path in named) else None
    return Scope((*FIXED, *extra), refusal or (foreign if not named else None))


def _key_value(field: str) -> tuple[str, str]:
    key, _, value = field.partition("\n")  # a key without "=" has no value at all
    return key, value


def _named(origin: str, value: str) -> Path | None:
    """The directory a ``core.worktree`` names: relative to the git directory, taken as the
    folder of the file that set it (an include elsewhere then names no match: refused)."""
    if not origin.startswith("file:"):
        return None
    return (Path(origin.removeprefix("file:")).parent / value).resolve()


def _foreign(top: Path) -> str | None:
    """Why the git directory that ``top/.git`` leads to is not ``top``'s own, or None. Its own:
    inside ``top`` (with no ``commondir`` leading out), or a linked worktree's directory whose
    back-link names ``top/.git`` (git's own record, outside the agent's reach). Else the bot's
    git would show another repository's files (their content, as deletions) for ``top``."""
    marker = top / ".git"
    try:
        if marker.is_dir():
            gitdir = marker.resolve()
        else:
            named = marker.read_text(errors="replace")[:4096].removeprefix("gitdir:").strip()
            gitdir = (top / named).resolve()
            back = gitdir / "gitdir"
            if back.is_file() and (gitdir / back.read_text().strip()).resolve() == marker:
                return None
        common = gitdir / "commondir"
        if common.is_file():
            gitdir = (gitdir / common.read_text(errors="replace").strip()).resolve()
    except (OSError, ValueError):
        return FOREIGN
    return None if gitdir.is_relative_to(top) else FOREIGN


def _marked_top(cwd: Path) -> Path | None:
    """The nearest of ``cwd`` and its parents holding a ``.git`` (a directory or a file)."""
    try:
        path = cwd.resolve()
        return next((p for p in (path, *path.parents) if (p / ".git").exists()), None)
    except OSError:
        return None


async def git(
    cwd: Path | str, *args: str, timeout_s: float = GIT_TIMEOUT_S, within: Scope | None = None
) -> Git:
    """Run git in ``cwd``, bounded, never prompting, with the repository's program-running
    configuration neutralised (``within``: a Scope already read for ``cwd``)."""
    where = within or await scope(cwd, timeout_s)
    if where.refusal is not None:
        return Git(128, "", where.refusal)
    return await _run(cwd, args, where, timeout_s)


async def _run(cwd: Path | str, args: tuple[str, ...], where: Scope, timeout_s: float) -> Git:
    proc = await asyncio.create_subprocess_exec(
        "git",
        "--no-pager",
        "-C",
        str(cwd),
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=where.env(),
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return Git(124, "", f"git {args[0]} took longer than {timeout_s:.0f}s")
    return Git(
        proc.returncode or 0,
        out.decode(errors="replace").strip(),
        err.decode(errors="replace").strip(),
    )
