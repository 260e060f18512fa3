"""What a sandboxed command, tool or check may never read, and which environment variables it
never gets: one list for every engine (Claude's ``--settings``, Codex's permission profile,
``/local``'s and the checks' bubblewrap line), measured in docs/sandbox.md.

Denied by default: the bot's settings file and ``~/.config/detach``, its data directory
(database, attachments, every task's worktree: a task's own directory inside it stays readable
and writable, each sandbox binds it back over the denial), the agents' logins and transcripts,
the owner's keys (``~/.ssh``, ``~/.gnupg``, cloud and cluster configs, ``~/.netrc``, the usual
token files of git, gh, npm, PyPI and cargo, shell histories), the sockets of container engines
and of the user's session, and ``DETACH_SANDBOX_DENY_READ``. Everything else stays readable
(read-only): the list names secrets, it is not an allow-list."""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

# under the home directory: the owner's keys and the configs that hold credentials
HOME_SECRETS = (
    ".config/detach",
    ".ssh",
    ".gnupg",
    ".aws",
    ".netrc",
    ".docker/config.json",
    ".kube",
    ".claude.json",  # may hold an API key given to /login
    ".git-credentials",
    ".config/gh",
    ".config/gcloud",
    ".azure",
    ".pypirc",
    ".npmrc",
    ".cargo/credentials.toml",
    ".password-store",
    ".local/share/keyrings",
    ".bash_history",
    ".zsh_history",
    ".pgpass",
    ".my.cnf",
)
# the database's companions, named even before they exist (Claude's Read rules are written
# around the task's directory from what the data directory holds when the turn starts)
DATABASE_FILES = (
    "detach.sqlite",
    "detach.sqlite-wal",
    "detach.sqlite-shm",
    "detach.sqlite-journal",
)
# under Claude Code's config directory: its login and every session's transcript
CLAUDE_SECRETS = (".credentials.json", "projects", "history.jsonl", "backups")
# under CODEX_HOME everything is denied but what Codex's own sandbox runs from (its helper
# binaries under tmp/, the shell snapshot it sources, its config): auth.json, every thread's
# rollout and its state databases are not readable (measured with 0.171.0: denying tmp/ makes
# every command fail)
CODEX_KEEP = frozenset({"tmp", "shell_snapshots", "config.toml", "skills", "rules", "AGENTS.md"})
# what Claude Code 2.1.197 itself hides from its sandbox (its built-in denyRead defaults)
SOCKETS = (
    "/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/buildkit/buildkitd.sock",
    "/run/dbus",
    "/run/user",
)
SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
# engines' logins that carry no secret-looking name
SECRET_NAMES = frozenset({"ANTHROPIC_API_KEY", "OPENAI_API_KEY", "CODEX_API_KEY"})
# secret-looking names of what is no secret: who commits (git log prints it anyway)
IDENTITY_NAMES = frozenset(
    f"GIT_{who}_{what}" for who in ("AUTHOR", "COMMITTER") for what in ("NAME", "EMAIL", "DATE")
)
# a ``*_ENV`` holding another variable's name, in capitals (a token is seldom all capitals):
# DETACH_LOCAL_API_KEY_ENV=OPENROUTER_API_KEY
NAMING = re.compile(r"_ENV$", re.IGNORECASE)
VARIABLE_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


@dataclass(frozen=True, slots=True)
class ReadDenial:
    """Where the secrets are on this machine; ``paths()`` lists them for one turn (an agent's
    home is listed afresh, so a Codex thread written since is denied too)."""

    home: Path
    claude_dir: Path
    codex_home: Path
    data_dir: Path
    settings_file: Path | None = None
    extra: tuple[Path, ...] = ()

    @classmethod
    def of(
        cls,
        environ: Mapping[str, str],
        data_dir: Path,
        settings_file: Path | None = None,
        extra: Iterable[Path] = (),
    ) -> ReadDenial:
        home = Path(environ.get("HOME") or Path.home())
        return cls(
            home=home,
            claude_dir=Path(environ.get("CLAUDE_CONFIG_DIR") or home / ".claude"),
            codex_home=Path(environ.get("CODEX_HOME") or home / ".codex"),
            data_dir=data_dir,
            settings_file=settings_file,
            extra=tuple(extra),
        )

    def paths(self) -> tuple[Path, ...]:
        """Absolute paths, each once (a symlinked one also as its target); some may not exist."""
        found = [
            self.data_dir,
            *(self.data_dir / name for name in DATABASE_FILES),
            *(self.home / name for name in HOME_SECRETS),
            *(self.claude_dir / name for name in CLAUDE_SECRETS),
            *_codex_entries(self.codex_home),
            *(Path(socket) for socket in SOCKETS),
            *([self.settings_file] if self.settings_file else []),
            *self.extra,
        ]
        return unique(found)


def unique(paths: Iterable[Path]) -> tuple[Path, ...]:
    """Absolute paths in order, without repeats; a symlink's target is added after it."""
    seen: dict[str, None] = {}  # strings: a turn lists ~40, and pathlib's parsing dominated
    for path in paths:
        absolute = os.path.abspath(os.path.expanduser(path))
        seen.setdefault(absolute, None)
        with contextlib.suppress(OSError, ValueError):
            seen.setdefault(os.path.realpath(absolute), None)
    return tuple(Path(p) for p in seen)


def _codex_entries(codex_home: Path) -> list[Path]:
    try:
        names = sorted(os.listdir(codex_home))
    except OSError:
        return [codex_home / "auth.json", codex_home / "sessions"]
    return [codex_home / name for name in names if name not in CODEX_KEEP]


def secret_names(environ: Mapping[str, str], also: Iterable[str] = ()) -> tuple[str, ...]:
    """The variables of ``environ`` a sandboxed command must not see: API keys, tokens,
    passwords (by name), and ``also`` (e.g. the variable an endpoint's key is in). A name that
    only looks secret is not one: git's author and committer, and a ``*_ENV`` whose value is the
    name of a variable of ``environ`` (that variable is a secret when its own name or ``also``
    says so)."""
    extra = {name for name in also if name}
    return tuple(
        sorted(
            name
            for name in environ
            if name in extra
            or name in SECRET_NAMES
            or (SECRET_NAME.search(name) and not _looks_secret_only(name, environ))
        )
    )


def _looks_secret_only(name: str, environ: Mapping[str, str]) -> bool:
    """Whether ``name`` matches ``SECRET_NAME`` though its value is no secret: git's identity,
    or a ``*_ENV`` naming a variable that exists (an all-capitals key is no name)."""
    if name in IDENTITY_NAMES:
        return True
    value = environ[name]
    return bool(NAMING.search(name) and VARIABLE_NAME.fullmatch(value) and value in environ)


def without_secrets(environ: Mapping[str, str], also: Iterable[str] = ()) -> dict[str, str]:
    """``environ`` minus ``secret_names``."""
    hidden = set(secret_names(environ, also))
    return {k: v for k, v in environ.items() if k not in hidden}


def outside(paths: Iterable[Path], keep: Path) -> tuple[Path, ...]:
    """``paths`` with each one that holds ``keep`` replaced by its entries that do not, down to
    ``keep`` (for deny rules that, unlike a sandbox's mounts, cannot be lifted again inside a
    denied directory). ``keep`` itself is never denied; what is denied inside it stays so."""
    result: list[Path] = []
    for path in paths:
        inner = next((k for k in _forms(keep) if k.is_relative_to(path)), None)
        result.extend(_around(path, inner) if inner is not None else [path])
    return tuple(result)


def held_by(paths: Iterable[Path], keep: Path) -> list[bool]:
    """For each of ``paths``, whether it is ``keep`` or one of its parents, as written or
    through symlinks (``keep``'s real path looked up once)."""
    forms = _forms(keep)
    return [any(k.is_relative_to(path) for k in forms) for path in paths]


def _forms(path: Path) -> tuple[Path, ...]:
    """``path`` absolute, and its real path when a symlink lies on the way."""
    absolute = Path(os.path.abspath(path))
    real = Path(os.path.realpath(absolute))
    return (absolute,) if real == absolute else (absolute, real)


def _around(parent: Path, keep: Path) -> list[Path]:
    """The entries of ``parent`` other than the one leading to ``keep``, recursively."""
    if parent == keep:
        return []
    try:
        names = sorted(os.listdir(parent))
    except OSError:
        return []
    step = parent / keep.relative_to(parent).parts[0]
    return [parent / n for n in names if parent / n != step] + _around(step, keep)
