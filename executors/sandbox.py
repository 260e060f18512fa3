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

from executors.denied import holds

PACKAGES = "bubblewrap socat"
PROBE_TIMEOUT_S = 10.0


@functools.cache
def _problem(path: str) -> str | None:
    bwrap = shutil.which("bwrap", path=path)
    missing = [name for name in ("bwrap", "socat") if shutil.which(name, path=path) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (apt install {PACKAGES})"
    assert bwrap is not None
    try:  # user namespaces may be switched off (containers, hardened kernels)
        done = subprocess.run(
            [bwrap, *_base_args(), "--", "true"],
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap cannot run: {exc}"
    if done.returncode != 0:
        detail = done.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap cannot run here: {detail[-1] if detail else done.returncode}"
    return None


def problem(environ: Mapping[str, str]) -> str | None:
    """Why the sandbox cannot work with this environment's PATH, or None when it works. The
    answer is cached per PATH (a probe runs bubblewrap once)."""
    return _problem(environ.get("PATH", ""))


def _base_args() -> list[str]:
    return [
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--tmpfs",
        "/tmp",
        "--unshare-net",
        "--unshare-pid",
        "--die-with-parent",
        "--new-session",
    ]


def confine(
    argv: list[str], writable: Path, environ: Mapping[str, str], denied: Iterable[Path] = ()
) -> list[str]:
    """``argv`` run by bubblewrap: the whole filesystem read-only but ``writable`` (and a private
    ``/tmp``), no network, its own process namespace; each ``denied`` directory is an empty
    tmpfs and each denied file an empty one (``/dev/null``), except ``writable`` itself, which
    stays readable and writable even inside a denied directory (mounts apply in order)."""
    bwrap = shutil.which("bwrap", path=environ.get("PATH", "")) or "bwrap"
    where = os.path.abspath(writable)
    real = os.path.realpath(where)  # bound by its real path: a symlink on the way still leads
    holders: list[Path] = []  # denials around ``writable`` come before its bind, others after
    inside: list[Path] = []
    for path in denied:
        if not path.is_absolute() or str(path) in (where, real):
            continue
        (holders if holds(path, Path(where)) else inside).append(path)
    return [
        bwrap,
        *_base_args(),
        *_hidden(holders),
        "--bind",
        real,
        real,
        *_hidden(inside),
        "--chdir",
        where,
        "--",
        *argv,
    ]


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
