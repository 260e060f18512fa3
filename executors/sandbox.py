"""The operating-system sandbox on Linux: bubblewrap (and socat, which Claude Code's sandbox uses
to proxy network traffic). Whether it works here, and a bubblewrap command line that confines a
command to one writable directory (used for a sandboxed task's check)."""

from __future__ import annotations

import functools
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

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


def confine(argv: list[str], writable: Path, environ: Mapping[str, str]) -> list[str]:
    """``argv`` run by bubblewrap: the whole filesystem read-only but ``writable`` (and a private
    ``/tmp``), no network, its own process namespace."""
    bwrap = shutil.which("bwrap", path=environ.get("PATH", "")) or "bwrap"
    where = str(writable)
    return [bwrap, *_base_args(), "--bind", where, where, "--chdir", where, "--", *argv]
