"""Where a task's branch is pushed: the remote's URL as the repository's own configuration file
names it (read with ``git config --file``: no include, no ``url.*.insteadOf`` of a worktree),
the one transport it allows, and the GitHub repository it is, if any."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from bot.errors import UserInputError
from executors.gitguard import GitGuard
from executors.gitscope import BASE

SCHEMES = frozenset({"https", "http", "ssh", "git", "file"})
SCP_LIKE = re.compile(r"(?:[\w.+-]+@)?(?P<host>[\w.-]+):(?P<path>[^:/\\][^:]*)")
SLUG = re.compile(r"/?(?P<owner>[\w.-]+)/(?P<name>[\w.-]+?)(?:\.git)?/?")


@dataclass(frozen=True, slots=True)
class Remote:
    name: str
    url: str
    scheme: str  # the only protocol git may use for it (GIT_ALLOW_PROTOCOL)
    github: str | None  # owner/name when the remote is on GitHub


def scheme_of(url: str) -> str | None:
    """The transport ``url`` takes, or None for one the bot does not push over (``ext::``,
    ``fd::``, an option in disguise)."""
    if url.startswith("-") or "::" in url:
        return None
    if url.startswith("/"):
        return "file"
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme:
        return parsed.scheme if parsed.scheme in SCHEMES and "://" in url else None
    return "ssh" if SCP_LIKE.fullmatch(url) else None


def github_slug(url: str, host: str) -> str | None:
    """``owner/name`` of a GitHub remote on ``host`` (github.com, or an Enterprise host)."""
    found = SCP_LIKE.fullmatch(url)
    if found is not None and "://" not in url:
        where, path = found["host"], found["path"]
    else:
        parsed = urllib.parse.urlsplit(url)
        where, path = parsed.hostname or "", parsed.path
    slug = SLUG.fullmatch(path)
    if where.lower() != host.lower() or slug is None:
        return None
    return f"{slug['owner']}/{slug['name']}"


def api_host(api_url: str) -> str:
    """The host whose remotes a GitHub REST base serves (api.github.com: github.com)."""
    host = urllib.parse.urlsplit(api_url).hostname or ""
    return "github.com" if host == "api.github.com" else host


async def find_remote(
    guard: GitGuard, common: Path, base_branch: str, named: str, github: tuple[str, str]
) -> Remote:
    """The remote of the repository whose common git directory is ``common``: ``named``, else
    the one ``base_branch`` tracks, else ``origin``; its push URL, else its URL. ``github``:
    (the API's host, an ``owner/name`` that overrides the URL's, or "")."""
    values = await _values(guard, common / "config")
    name = named or values.get(f"branch.{base_branch}.remote") or "origin"
    url = values.get(f"remote.{name}.pushurl") or values.get(f"remote.{name}.url")
    if not url:
        raise UserInputError("pr.no_remote", remote=name)
    scheme = scheme_of(url)
    if scheme is None:
        raise UserInputError("pr.bad_remote", remote=name, url=url)
    host, repo = github
    return Remote(name, url, scheme, repo or github_slug(url, host))


async def _values(guard: GitGuard, config: Path) -> dict[str, str]:
    """One configuration file's values as written there (includes not followed; the last of
    a key, as ``--get`` gives it): one git process."""
    args = ("config", "--file", str(config), "--null", "--list")
    found = await guard.git("/", *args, within=BASE)
    if found.code != 0:
        return {}
    pairs = (entry.partition("\n") for entry in found.out.split("\0") if entry)
    return {key: value for key, _, value in pairs}


def shown(url: str) -> str:
    """``url`` as the chat may show it: without a user or password in it."""
    parsed = urllib.parse.urlsplit(url)
    if "://" not in url or "@" not in parsed.netloc:
        return url
    return parsed._replace(netloc=parsed.netloc.rsplit("@", 1)[1]).geturl()
