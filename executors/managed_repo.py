"""The task's repository as a Managed Agents session resource: the ``origin`` remote when it
is on github.com (cloned into the remote container by the API; a private one needs the
GitHub access the API's own setup gives), checked out at the branch the local one tracks,
else the default branch. Without a GitHub remote the remote agent starts without this folder's
files (the acknowledgement says so). Git runs confined (``executors.gitguard``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from executors.gitguard import GitGuard

GIT_S = 10.0
GITHUB = re.compile(
    r"^(?:https://(?:[^@/]+@)?github\.com/|git@github\.com:|ssh://git@github\.com/)"
    r"(?P<owner>[\w.-]+)/(?P<name>[\w.-]+?)(?:\.git)?/?$"
)


def github_url(remote: str) -> str | None:
    """``https://github.com/owner/name`` of a github.com remote URL (no credentials), or None."""
    match = GITHUB.match(remote.strip())
    if match is None:
        return None
    return f"https://github.com/{match['owner']}/{match['name']}"


async def repository(cwd: Path, denied: Iterable[Path]) -> dict[str, Any] | None:
    """The ``github_repository`` resource for ``cwd``, or None when it has no GitHub remote."""
    hidden = tuple(denied)
    git = GitGuard(lambda: hidden)
    remote = await git.git(cwd, "remote", "get-url", "origin", timeout_s=GIT_S)
    url = github_url(remote.out) if remote.code == 0 else None
    if url is None:
        return None
    resource: dict[str, Any] = {"type": "github_repository", "url": url}
    tracked = await git.git(
        cwd, "rev-parse", "--abbrev-ref", "--symbolic-full-name", "@{upstream}", timeout_s=GIT_S
    )
    if tracked.code == 0 and tracked.out.startswith("origin/"):
        resource["checkout"] = {"type": "branch", "name": tracked.out.removeprefix("origin/")}
    return resource
