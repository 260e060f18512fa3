"""What git may obey in a directory an agent may have written: the overrides of one repository's
configuration, or why the bot's git does not run there at all. Pure: it reads the listing of
``git config --list --show-scope --show-origin --null`` (which runs nothing) and the ``.git``
marker; ``executors.gitguard`` runs the commands.

Overrides reach git as ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n`` (a key is
never re-parsed, so a driver named ``a=b`` cannot smuggle a value): the fixed ones (fsmonitor,
hooks, pager, editor, signing, credential helpers, auto-gc) and, for each driver the repository
defines (``filter.*``, ``diff.*.command|textconv``, ``merge.*.driver``), the owner's global value
or nothing. Refused, not followed: a ``core.worktree`` naming another directory, a ``.git``
leading to another repository, and a repository that fetches on demand (a partial clone, a
promisor remote, a URL rewrite of its own). These keys are a second wall, not the first: the
bot's git runs confined, with every transport closed by its environment."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from executors.reading import read_regular

PLAIN_DIFF = ("--no-color", "--no-ext-diff", "--no-textconv")  # what every diff of the bot passes
# set and empty: no transport at all, whatever protocol.*.allow says (measured: "transport
# 'ext' not allowed"); GIT_NO_LAZY_FETCH (git 2.45+) also stops a promisor's fetch where known
CLOSED = {"GIT_ALLOW_PROTOCOL": "", "GIT_NO_LAZY_FETCH": "1", "GIT_PROTOCOL_FROM_USER": "0"}
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
    **CLOSED,
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
    ("protocol.allow", "never"),
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
# what makes a repository fetch from a remote by itself (a missing object, a rewritten address)
ON_DEMAND = re.compile(
    r"extensions\.partialclone|remote\..+\.(promisor|partialclonefilter)|url\..+\.(push)?insteadof",
    re.IGNORECASE,
)
# of FIXED, what an agent CLI's env gets; safe.bareRepository whatever the mode: a HEAD, objects/
# and refs/ an agent planted at the top of a directory are no repository for the CLI's git
BARE = ("safe.bareRepository", "explicit")
CLI_FIXED = {"core.fsmonitor", "diff.external", BARE[0]}
NEUTRAL = {"driver": "false"}  # a merge driver that always fails: a conflict, never a program
OWNER_SCOPES = {"system", "global"}  # the rest is the repository's (local, worktree)
WORKTREE_MOVED = "core.worktree is set in this repository's configuration; not followed"
FOREIGN = "the .git here leads to another repository's git directory; not followed"
FETCHES = (
    "this repository fetches from a remote on demand (a partial clone, a promisor remote or a "
    "URL rewrite in its own configuration); the bot's git does not run in it"
)
MARKER_BYTES = 4096  # a ``.git`` file, ``gitdir``, ``commondir``: one line each


@dataclass(frozen=True, slots=True)
class Scope:
    """The overrides of one directory's git commands, or why git is not run there at all."""

    overrides: tuple[tuple[str, str], ...]
    refusal: str | None = None

    def env(self, home: str) -> dict[str, str]:
        """The whole environment of the bot's own git."""
        return {**ENV, "HOME": home, **_as_env(self.overrides)}

    def cli_env(self, sandboxed: bool) -> dict[str, str]:
        """What an agent CLI's environment gets for the git it runs itself at start (``status``,
        ``log``): sandboxed, the drivers and fsmonitor neutralised (its git otherwise works as
        the owner set it up: hooks, transports, signing); in a repository the bot refuses,
        whatever the mode, no transport either (a promisor's lazy fetch runs its remote)."""
        kept = [(k, v) for k, v in self.overrides if k in CLI_FIXED or _driver(k)]
        env = _as_env(kept if sandboxed else [BARE])
        return {**env, **CLOSED} if self.refusal is not None else env


def under(env: Mapping[str, str], cli: Mapping[str, str]) -> dict[str, str]:
    """``env`` (an agent's, with what the owner's environment passes on) with ``cli`` (a
    ``cli_env``) over it: the owner's own ``GIT_CONFIG_*`` entries kept first and ``cli``'s
    numbered after them, so ours win where both set a key; an owner's set git could not read
    (a missing key or value, a count that is no number) is replaced, as git would refuse it."""
    if "GIT_CONFIG_COUNT" not in cli:
        return {**env, **cli}
    owned, ours = _entries(env), _entries(cli)
    plain = {k: v for k, v in env.items() if not k.startswith(GIT_CONFIG)}
    rest = {k: v for k, v in cli.items() if not k.startswith(GIT_CONFIG)}
    return {**plain, **rest, **_as_env([*owned, *ours])}


GIT_CONFIG = ("GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_")
OWNER_ENTRIES_MAX = 1000


def _entries(env: Mapping[str, str]) -> list[tuple[str, str]]:
    """The ``GIT_CONFIG_*`` entries of ``env`` (``_as_env``'s inverse); none when git could not
    read them."""
    count = env.get("GIT_CONFIG_COUNT", "0")
    if not count.isdigit() or int(count) > OWNER_ENTRIES_MAX:
        return []
    keys = [env.get(f"GIT_CONFIG_KEY_{n}") for n in range(int(count))]
    values = [env.get(f"GIT_CONFIG_VALUE_{n}") for n in range(int(count))]
    if any(k is None or not k for k in keys) or any(v is None for v in values):
        return []
    return [(str(k), str(v)) for k, v in zip(keys, values, strict=True)]


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
OUTSIDE = _as_env([BARE])  # an agent CLI's env where no ``.git`` is: no repository at all


def from_listing(listing: str, top: Path | None, foreign: str | None = None) -> Scope:
    """The Scope for the NUL-separated ``scope, origin, key\\nvalue`` entries of ``git config
    --list --show-scope --show-origin --null``: a driver key the repository set gets the owner's
    own (global) value back, or a neutral one; a filter left without a program is no longer
    required. Refused: a repository of its own that fetches on demand; a ``core.worktree``
    naming another directory than ``top`` (the work tree's top as its ``.git`` shows it; a
    submodule's names its own top); ``foreign`` (why ``top/.git`` is not ``top``'s own), unless
    the configuration there names ``top`` as its work tree, as a submodule's does."""
    fields = listing.split("\0")
    entries = [
        (fields[i], fields[i + 1], *_key_value(fields[i + 2])) for i in range(0, len(fields) - 2, 3)
    ]
    own = [
        (origin, key, value) for where, origin, key, value in entries if where not in OWNER_SCOPES
    ]
    owner = {key: value for where, _, key, value in entries if where in OWNER_SCOPES}
    planted = {key: m for _, key, _ in own if (m := DRIVERS.fullmatch(key)) is not None}
    extra = [(key, owner.get(key, NEUTRAL.get(m["var"], ""))) for key, m in planted.items()]
    unowned = {m["name"] for key, m in planted.items() if m["kind"] == "filter"} - {
        m["name"] for key, m in planted.items() if key in owner
    }
    extra += [(f"filter.{name}.required", "false") for name in sorted(unowned)]
    named = [_named(origin, value) for origin, key, value in own if key == "core.worktree"]
    fetches = any(_fetching(key, value) for _, key, value in own)
    moved = any(path != top or top is None for path in named)
    refusal = FETCHES if fetches else WORKTREE_MOVED if moved else None
    return Scope((*FIXED, *extra), refusal or (foreign if not named else None))


def _fetching(key: str, value: str) -> bool:
    """A key that makes git fetch by itself; a promisor explicitly off is not one."""
    if ON_DEMAND.fullmatch(key) is None:
        return False
    return not (key.lower().endswith(".promisor") and value.strip().lower() in _FALSE)


_FALSE = {"false", "no", "off", "0"}


def _key_value(field: str) -> tuple[str, str]:
    key, _, value = field.partition("\n")  # a key without "=" has no value at all
    return key, value


def _named(origin: str, value: str) -> Path | None:
    """The directory a ``core.worktree`` names: relative to the git directory, taken as the
    folder of the file that set it (an include elsewhere then names no match: refused)."""
    if not origin.startswith("file:"):
        return None
    return (Path(origin.removeprefix("file:")).parent / value).resolve()


def line_of(path: Path) -> str | None:
    """The first line of a small regular file an agent may have planted (never a FIFO, a
    device or a link: read without blocking), or None."""
    data = read_regular(path, MARKER_BYTES)
    if data is None or len(data) > MARKER_BYTES:
        return None
    return data.decode(errors="replace").strip()


def foreign(top: Path) -> str | None:
    """Why the git directory that ``top/.git`` leads to is not ``top``'s own, or None. Its own:
    inside ``top`` (with no ``commondir`` leading out), or a linked worktree's directory whose
    back-link names ``top/.git`` (git's own record, outside the agent's reach). Else the bot's
    git would show another repository's files (their content, as deletions) for ``top``.
    Blocking (file reads): call it off the event loop."""
    marker = top / ".git"
    try:
        if marker.is_dir():
            gitdir = marker.resolve()
        else:
            named = line_of(marker)
            if named is None or not named.startswith("gitdir:"):
                return FOREIGN
            gitdir = (top / named.removeprefix("gitdir:").strip()).resolve()
            back = line_of(gitdir / "gitdir")
            if back is not None and (gitdir / back).resolve() == marker:
                return None
        common = line_of(gitdir / "commondir")
        if common is not None:
            gitdir = (gitdir / common).resolve()
    except (OSError, ValueError, RuntimeError):
        return FOREIGN
    return None if gitdir.is_relative_to(top) else FOREIGN


def marked_top(cwd: Path) -> Path | None:
    """The nearest of ``cwd`` and its parents holding a ``.git`` (a directory or a file).
    Blocking (stats): call it off the event loop."""
    try:
        path = cwd.resolve()
        return next((p for p in (path, *path.parents) if (p / ".git").exists()), None)
    except (OSError, RuntimeError):
        return None
