"""Several of the bot's git commands in one bubblewrap start (issue #54): the repository's
configuration is listed first, the bot reads it (``gitscope.from_listing``), and the same jail
then runs the commands with the overrides the bot handed back, or nothing when the bot refused
the repository. A jail's start (its namespaces) costs about 6 ms on a quiet 2-core VM and tens
under load; a turn's baseline took one for the listing and then two more.

The jail is the one ``GitGuard`` gives each command (the same binds, denials, namespaces and
environment); inside it, bash (``--norc --noprofile``, nothing of the environment it reads)
runs git. The overrides come in on its stdin as NUL-separated fields, read with ``read -r -d
''`` and exported as ``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n``: never parsed as shell or as
configuration. Each output on stdout ends with a mark holding a random nonce and the command's
exit status; the nonce is made for this call and the listing runs no program that could learn
it."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable, Sequence

from executors.gitscope import Scope

SCRIPT = r"""
set -u
d=$1; mark=$2; wait=$3; shift 3
IFS= read -r -t "$wait" -d '' go || exit 0
git --no-pager -C "$d" config --list --show-scope --show-origin --null </dev/null
printf '%s%d\n' "$mark" "$?"
IFS= read -r -d '' n || exit 0
case $n in ''|*[!0-9]*) exit 2;; esac
i=0
while [ "$i" -lt "$n" ]; do
  IFS= read -r -d '' k || exit 2
  IFS= read -r -d '' v || exit 2
  export "GIT_CONFIG_KEY_$i=$k" "GIT_CONFIG_VALUE_$i=$v"
  i=$((i + 1))
done
export GIT_CONFIG_COUNT="$n"
while [ "$#" -gt 0 ]; do
  c=$1; shift
  git --no-pager -C "$d" "${@:1:$c}" </dev/null
  printf '%s%d\n' "$mark" "$?"
  shift "$c"
done
"""
CHUNK = 1 << 16
WAIT_S = 600  # how long a jail started ahead waits for its go (``executors.gitwarm``)
GO = b"go\0"


class Marked:
    """Reads a session's stdout up to each mark: ``nonce`` then the exit status and a newline.
    Linear in the output (the repository's status is the agent's to make long): each chunk is
    searched once, from just before its start."""

    def __init__(self, stream: asyncio.StreamReader, nonce: str) -> None:
        self._stream = stream
        self._mark = re.compile(re.escape(nonce.encode()) + rb"(\d+)\n")
        self._overlap = len(nonce) + 24  # a mark cut between two chunks
        self._buffer = bytearray()

    async def next(self) -> tuple[int, bytes] | None:
        """The next output and its exit status; None: the session ended before its mark."""
        searched = 0
        while (found := self._mark.search(self._buffer, max(0, searched - self._overlap))) is None:
            searched = len(self._buffer)
            chunk = await self._stream.read(CHUNK)
            if not chunk:
                return None
            self._buffer += chunk
        status, out = int(bytes(found[1])), bytes(self._buffer[: found.start()])
        del self._buffer[: found.end()]
        return status, out


def argv(cwd: str, nonce: str, commands: Sequence[tuple[str, ...]], bash: str) -> list[str]:
    """bash's arguments: the script, the directory, the mark, how long to wait for its go
    (``GO``, before anything runs), each command as its length and its arguments."""
    rest = [arg for command in commands for arg in (str(len(command)), *command)]
    return [bash, "--norc", "--noprofile", "-c", SCRIPT, "bash", cwd, nonce, str(WAIT_S), *rest]


def nonce() -> str:
    return f"detach-{secrets.token_hex(16)}:"


def overrides(scope: Scope) -> bytes:
    """The Scope's overrides as the script reads them: their count, then each key and value,
    each field ended by a NUL (a key or value holding one cannot be stored by git)."""
    fields = [str(len(scope.overrides))]
    for key, value in scope.overrides:
        fields += [key, value]
    return b"".join(field.encode() + b"\0" for field in fields)


async def converse(
    proc: asyncio.subprocess.Process,
    token: str,
    count: int,
    decide: Callable[[int, str], Awaitable[Scope]],
) -> tuple[Scope, list[tuple[int, str]], str]:
    """The session with a started jail: its listing's exit status and text to ``decide`` (128
    and nothing when the jail or bash did not run), the Scope's overrides back, or nothing
    when it refuses; then the ``count`` commands' exit statuses and outputs (fewer when the
    jail ended early) and the whole stderr."""
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    errors = asyncio.ensure_future(proc.stderr.read())
    marked = Marked(proc.stdout, token)
    done: list[tuple[int, str]] = []
    try:
        await _send(proc.stdin, GO, close=False)  # the repository is read from now on
        code, listing = await marked.next() or (128, b"")
        scope = await decide(code, _text(listing))
        await _send(proc.stdin, overrides(scope) if scope.refusal is None else b"")
        while scope.refusal is None and len(done) < count:
            found = await marked.next()
            if found is None:
                break
            done.append((found[0], _text(found[1])))
        await proc.wait()
        return scope, done, _text(await errors)
    finally:
        errors.cancel()


async def _send(stdin: asyncio.StreamWriter, data: bytes, close: bool = True) -> None:
    try:
        if data:
            stdin.write(data)
            await stdin.drain()
        if close:
            stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # bash ended already: what it wrote says why


def _text(data: bytes) -> str:
    return data.decode(errors="replace").strip()
