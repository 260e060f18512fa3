"""The operating-system sandbox on Linux: bubblewrap (and socat, which Claude Code's sandbox uses
to proxy network traffic). Whether it works here, and a bubblewrap command line that confines a
command to one writable directory and hides the denied paths (executors/denied.py) from it (used
for a sandboxed task's check and /local's commands)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from bot.models import Phrase
from executors.denied import held_by

PACKAGES = "bubblewrap socat"
PROBE_TIMEOUT_S = 10.0


@functools.cache
def _problem(path: str) -> Phrase | None:
    bwrap = shutil.which("bwrap", path=path)
    missing = [name for name in ("bwrap", "socat") if shutil.which(name, path=path) is None]
    if missing:
        return Phrase("sandbox.missing", {"names": tuple(missing), "packages": PACKAGES})
    assert bwrap is not None
    try:  # user namespaces may be switched off (containers, hardened kernels)
        done = subprocess.run(
            [bwrap, *_base_args(), "--", "true"],
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Phrase("sandbox.bwrap_failed", {"detail": str(exc)})
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        return Phrase(
            "sandbox.bwrap_failed", {"detail": detail[-1] if detail else str(done.returncode)}
        )
    return None


def problem(environ: Mapping[str, str]) -> Phrase | None:
    """Why the sandbox cannot work with this environment's PATH, or None when it works. The
    answer is cached per PATH (a probe runs bubblewrap once)."""
    return _problem(environ.get("PATH", ""))


def status(problem: Phrase | None) -> Phrase:
    """/status's words on the sandbox: it works, or why it cannot."""
    if problem is None:
        return Phrase("probe.sandbox_works")
    return Phrase("probe.sandbox_unavailable", {"reason": problem})


def _base_args(private_tmp: bool = True) -> list[str]:
    """The root read-only, fresh /dev and /proc, no network, its own process namespace and
    session, gone with its parent; ``private_tmp``: an empty writable /tmp."""
    return [
        *("--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"),
        *(("--tmpfs", "/tmp") if private_tmp else ()),
        *("--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"),
    ]


def confine(
    argv: list[str], writable: Path, environ: Mapping[str, str], denied: Iterable[Path] = ()
) -> list[str]:
    """``argv`` run by bubblewrap: the whole filesystem read-only but ``writable`` (and a private
    ``/tmp``), no network, its own process namespace; each ``denied`` directory is an empty
    tmpfs and each denied file an empty one (``/dev/null``), except ``writable`` itself, which
    stays readable and writable even inside a denied directory (mounts apply in order); the
    ``.git/config``, ``hooks`` and ``info`` of a repository at its top stay read-only, and so
    do its ``.claude`` and ``.mcp.json`` (see ``_claude_kept``)."""
    bwrap = shutil.which("bwrap", path=environ.get("PATH", "")) or "bwrap"
    where = os.path.abspath(writable)
    real = os.path.realpath(where)  # bound by its real path: a symlink on the way still leads
    holders: list[Path] = []  # denials around ``writable`` come before its bind, others after
    inside: list[Path] = []
    kept = [p for p in denied if p.is_absolute() and str(p) not in (where, real)]
    for path, holding in zip(kept, held_by(kept, Path(where)), strict=True):
        (holders if holding else inside).append(path)
    return [
        bwrap,
        *_base_args(),
        *_hidden(holders),
        "--bind",
        real,
        real,
        *_hidden(inside),
        *_git_kept(Path(real)),
        *_claude_kept(Path(real)),
        "--chdir",
        where,
        "--",
        *argv,
    ]


def jail(
    argv: list[str], bwrap: str, binds: Iterable[tuple[Path, bool]], denied: Iterable[Path]
) -> list[str]:
    """``argv`` as the bot's own tools run where an agent may have written (git): the whole
    filesystem read-only, no network, its own process namespace, each ``denied`` path hidden;
    each of ``binds`` (a path, and whether it is writable) bound over whatever denial holds it.
    Mounts go parents first, so a denial inside a bound path stays in force."""
    hidden = [Path(os.path.abspath(p)) for p in denied if p.is_absolute()]
    mounts: dict[str, list[str]] = {}
    for path, writable in binds:
        real = os.path.realpath(path)
        # a read-only one only where a denial hides it (else the root's own bind shows it)
        if os.path.exists(real) and (writable or any(held_by(hidden, Path(real)))):
            mounts[real] = ["--bind" if writable else "--ro-bind", real, real]
    for path in hidden:
        mounts.setdefault(str(path), _hidden([path]))
    ordered = sorted(mounts, key=lambda where: len(Path(where).parts))
    return [
        bwrap,
        *_base_args(private_tmp=False),  # a repository under /tmp stays where git looks
        *(arg for where in ordered for arg in mounts[where]),
        "--",
        *argv,
    ]


GIT_KEPT = ("config", "hooks", "info")  # what git runs or obeys: a planted hook, fsmonitor, filter


def _git_kept(writable: Path) -> list[str]:
    """bubblewrap's arguments that keep a repository's own configuration and hooks at the top
    of ``writable`` read-only, as Claude Code's sandbox does: a command of the task may commit,
    but not plant what git would run for the owner (or for the bot) later."""
    git = writable / ".git"
    if git.is_symlink() or not git.is_dir():
        return []  # a worktree's ``.git`` file points outside, which is read-only anyway
    args: list[str] = []
    for name in GIT_KEPT:
        path = git / name
        if path.exists() and not path.is_symlink():
            args += ["--ro-bind", str(path), str(path)]
    return args


CLAUDE_KEPT = (".claude", ".mcp.json")  # what Claude Code obeys in a directory: hooks, rules


def _claude_kept(writable: Path) -> list[str]:
    """bubblewrap's arguments that keep Claude Code's project configuration at the top of
    ``writable`` read-only: a command of the task may not plant hooks or allow rules that a
    later turn of the owner's would obey. A missing ``.claude`` becomes an empty read-only
    tmpfs (its mount point, an empty directory, stays behind); a missing ``.mcp.json`` is left
    alone (its mount point would be an empty file in the owner's tree): the bot's turns pass
    ``--strict-mcp-config``, so no turn of the bot's starts a server it names."""
    args: list[str] = []
    for name in CLAUDE_KEPT:
        path = writable / name
        if path.is_symlink():
            continue  # it leads somewhere: outside ``writable`` that is read-only anyway
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
        elif name == ".claude":
            args += ["--tmpfs", str(path), "--remount-ro", str(path)]
    return args


def _hidden(paths: Iterable[Path]) -> list[str]:
    """bubblewrap's arguments that hide ``paths``; one that does not exist is left alone (a
    mount point cannot be made for it on a read-only root)."""
    args: list[str] = []
    for path in paths:
        if path.is_dir():
            args += ["--tmpfs", str(path)]
        elif path.exists():
            args += ["--ro-bind", "/dev/null", str(path)]
    return args
