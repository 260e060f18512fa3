"""The owner's GitHub token: ``gh auth token`` (the CLI they are logged into), else
``GITHUB_TOKEN``, else ``DETACH_GITHUB_TOKEN``. Never logged, never in an agent's environment;
gh's is added to the redactor's secrets at start (``bot.core``)."""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Mapping

GH_TIMEOUT_S = 10.0
TOKEN_TTL_S = 300.0


async def find_token(gh_bin: str, environ: Mapping[str, str], configured: str) -> str:
    """The owner's token: ``gh auth token`` (when gh is there and logged in), else
    ``GITHUB_TOKEN``, else ``configured``; "" when none."""
    return await gh_token(gh_bin) or environ.get("GITHUB_TOKEN", "") or configured


async def gh_token(gh_bin: str) -> str:
    """What ``gh auth token`` says, bounded; "" without gh or a login."""
    found = await asyncio.to_thread(shutil.which, gh_bin)
    if found is None:
        return ""
    try:
        proc = await asyncio.create_subprocess_exec(
            found,
            "auth",
            "token",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError:
        return ""
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), GH_TIMEOUT_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return ""
    return out.decode(errors="replace").strip() if proc.returncode == 0 else ""


class Token:
    """The owner's token as ``find_token`` finds it, kept ``TOKEN_TTL_S`` (a login after start
    counts then); "" is asked again at once."""

    def __init__(self, gh_bin: str, environ: Mapping[str, str], configured: str) -> None:
        self._args = (gh_bin, environ, configured)
        self._value = ""
        self._at = 0.0

    async def __call__(self) -> str:
        now = time.monotonic()
        if not self._value or now - self._at > TOKEN_TTL_S:
            self._value, self._at = await find_token(*self._args), now
        return self._value
