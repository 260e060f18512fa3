"""Small pieces of a test machine: a PATH without bubblewrap, an empty git repository."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

TOOLS = ("node", "sh", "bash", "git", "socat", "env", "touch")


def path_without_bwrap(tmp_path: Path) -> str:
    """A PATH with what the agent CLIs need but bubblewrap (a machine without the sandbox)."""
    bare = tmp_path / "bin-without-bwrap"
    bare.mkdir(exist_ok=True)
    for name in TOOLS:
        found = shutil.which(name)
        if found and not (bare / name).exists():
            os.symlink(found, bare / name)
    return str(bare)


def empty_repository(path: Path) -> None:
    """``git init`` with one empty commit (a repository a worktree can be cut from)."""
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(
        ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q"]
        + ["--allow-empty", "-m", "init"],
        check=True,
    )
