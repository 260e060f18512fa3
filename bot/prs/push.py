"""The one git the bot runs outside the sandbox, on the owner's tap only: a push of a task's
commit to its remote with the owner's own credentials (their global git configuration, their
ssh agent), hardened. It runs from an empty git directory of its own that borrows the
repository's objects (``objects/info/alternates``), so nothing the repository's or a worktree's
configuration says (``url.*.insteadOf``, a ``pushurl`` rewrite, ``core.sshCommand``, an include)
is read; no hook runs on either side (``core.hooksPath=/dev/null``, given to a local remote's
``receive-pack`` too); git may speak only the remote URL's own protocol; and it is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.errors import UserInputError
from bot.prs.remote import Remote

log = logging.getLogger(__name__)
HARDENED = (
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "protocol.allow=never",
    "push.recurseSubmodules=no",
    "submodule.recurse=false",
    "push.gpgSign=false",
)
# what the owner's credentials and transports need of the bot's own environment
PASSED = (
    "HOME",
    "PATH",
    "USER",
    "LOGNAME",
    "SSH_AUTH_SOCK",
    "XDG_CONFIG_HOME",
    "GIT_CONFIG_GLOBAL",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "NO_PROXY",
    "no_proxy",
)
LOGIN = ("authentication failed", "could not read username", "permission denied")
_FORBIDDEN = re.compile(r"\b403\b")  # HTTP's "forbidden", as git quotes it in an error line
REASON_CHARS = 300


@dataclass(frozen=True, slots=True)
class Pushed:
    url: str
    ref: str  # refs/heads/<branch> on the remote
    commit: str


class Pusher:
    """``environ``: the bot's own environment (the owner's); ``timeout_s``: a push's bound."""

    def __init__(self, environ: Mapping[str, str], timeout_s: float) -> None:
        self._environ = environ
        self._timeout_s = timeout_s

    async def push(self, common: Path, remote: Remote, commit: str, branch: str) -> Pushed:
        """``commit`` (an object of the repository whose git directory is ``common``) sent as
        ``branch`` of ``remote``; refused with git's reason in one line (``pr.rejected``,
        ``pr.protected``, ``pr.no_login``, ``pr.push_timeout``)."""
        ref = f"refs/heads/{branch}"
        empty = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="detach-push-"))
        try:
            await asyncio.to_thread(_borrowing, empty, common / "objects")
            code, out = await self._run(_argv(empty, remote, f"{commit}:{ref}"), remote)
        finally:
            await asyncio.to_thread(shutil.rmtree, empty, True)
        if code != 0:
            raise _refusal(remote, out)
        log.info("pushed %s to %s as %s", commit[:10], remote.name, ref)
        return Pushed(remote.url, ref, commit)

    async def _run(self, argv: list[str], remote: Remote) -> tuple[int, str]:
        env = {k: self._environ[k] for k in PASSED if k in self._environ}
        env |= {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_ALLOW_PROTOCOL": remote.scheme,
            "GIT_PROTOCOL_FROM_USER": "0",
            "LC_ALL": "C",
        }
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
            cwd="/",
            start_new_session=True,  # its ssh and helpers are stopped with it
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), self._timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            raise UserInputError("pr.push_timeout", seconds=round(self._timeout_s)) from None
        return proc.returncode or 0, out.decode(errors="replace")


def _argv(empty: Path, remote: Remote, refspec: str) -> list[str]:
    fixed = [arg for pair in HARDENED for arg in ("-c", pair)]
    fixed += ["-c", f"protocol.{remote.scheme}.allow=always"]
    # a local remote's receive-pack runs here, with its repository's hooks: none of them
    receiving = (
        [f"--receive-pack=git {' '.join(f'-c {p}' for p in HARDENED[:2])} receive-pack"]
        if remote.scheme == "file"
        else []
    )
    return [
        "git",
        *fixed,
        f"--git-dir={empty}",
        "push",
        "--porcelain",
        "--no-verify",
        "--no-recurse-submodules",
        *receiving,
        remote.url,
        refspec,
    ]


def _borrowing(empty: Path, objects: Path) -> None:
    """An empty bare repository whose objects are ``objects`` (no hooks, no configuration
    of the repository's). Blocking."""
    (empty / "objects" / "info").mkdir(parents=True)
    (empty / "refs" / "heads").mkdir(parents=True)
    (empty / "HEAD").write_text("ref: refs/heads/main\n")
    (empty / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
    (empty / "objects" / "info" / "alternates").write_text(f"{objects.resolve()}\n")


def _refusal(remote: Remote, output: str) -> UserInputError:
    """git's reason in one line, as the error the owner can act on."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    rejected = [line.split("\t")[-1] for line in lines if line.startswith("!")]
    errors = [line for line in lines if line.startswith(("fatal:", "error:", "remote:"))]
    reason = (rejected or errors or lines or ["?"])[-1][:REASON_CHARS]
    low = output.lower()
    if "protected branch" in low:
        return UserInputError("pr.protected", remote=remote.name, reason=reason)
    # a ref refused means the login worked; a login's words are read in git's errors only (a
    # commit id or a path may hold "403")
    said = "\n".join(errors).lower()
    if not rejected and (any(word in said for word in LOGIN) or _FORBIDDEN.search(said)):
        return UserInputError("pr.no_login_push", remote=remote.name, reason=reason)
    return UserInputError("pr.rejected", remote=remote.name, reason=reason)
