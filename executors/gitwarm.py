"""Jails started ahead for the bot's next git reads (issue #54): bubblewrap's start (its
namespaces, the denied paths' mounts) is most of what the bot's git costs before an agent
(about 6 ms on a quiet 2-core VM, 15 to 40 under load), and none of it depends on the moment
the repository is read. So a jail is started for the next read of a directory with the same
commands (a turn's next baseline, its card's read, a repository's next head) and
waits, before anything runs in it, for its go (``executors.gitsession``); that read takes it
and reads the repository from that moment on. At most ``SLOTS`` wait.

Used only where it is the same jail that would be started now: the same directory and
commands, the same environment, and the same bubblewrap arguments computed now (the denied
paths as they are now, each one's kind and existence, the directory's real path); else it
is stopped and a jail is started as usual. Nothing of a task is in it: bash waiting on its
stdin inside the jail, for at most ``gitsession.WAIT_S`` (then it ends by itself)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from executors import gitsession
from executors.tree import ended_waiting

Spawn = Callable[[list[str], Mapping[str, str]], Awaitable[asyncio.subprocess.Process]]
STOP_S = 5.0
MARGIN_S = 60.0  # a jail this close to its bash's end of waiting is not taken


@dataclass(frozen=True, slots=True)
class Waiting:
    """A started jail: what it was started for and with."""

    cwd: str
    commands: tuple[tuple[str, ...], ...]
    token: str
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    proc: asyncio.subprocess.Process
    started: float = 0.0  # monotonic: taken only well before its bash stops waiting
    # what each path of its arguments was when it started (device, inode): a denied file
    # replaced since (a rename over it) is no longer under the jail's mask
    identities: tuple[tuple[str, tuple[int, int] | None], ...] = ()


Key = tuple[str, tuple[tuple[str, ...], ...]]  # a jail's directory and commands
# jails waiting at most: the last in-place turn's next baseline, a repository's next head, the
# last worktrees' next reads (with two, a /detach in a worktree stopped the in-place
# directory's jail, and the next turn there started a cold one)
SLOTS = 4


class WarmJail:
    """At most ``slots`` jails waiting, one for each directory and commands (the one least
    recently wanted is stopped for a newer one)."""

    def __init__(self, slots: int = SLOTS) -> None:
        self._slots = slots
        self._waiting: dict[Key, Waiting] = {}  # oldest first
        self._stopping: set[asyncio.Task[None]] = set()
        self._spawning: set[asyncio.Future[asyncio.subprocess.Process]] = set()
        self._later: dict[Key, asyncio.Task[None]] = {}
        # the starts under way: a take for the same waits for it, rather than start a second
        self._starting: dict[Key, asyncio.Future[None]] = {}

    def later(
        self,
        delay_s: float,
        cwd: str,
        commands: Sequence[tuple[str, ...]],
        start: Callable[[], Awaitable[None]],
    ) -> None:
        """``start`` (a ``prepare`` of these) in ``delay_s``, off the caller's way: a turn's
        card is sent meanwhile without a jail's start beside it. A newer one of the same
        directory and commands replaces it."""
        key = (cwd, tuple(commands))
        if (pending := self._later.pop(key, None)) is not None:
            pending.cancel()
        task = self._later[key] = asyncio.ensure_future(_after(delay_s, start))
        task.add_done_callback(functools.partial(self._started_later, key))

    def _started_later(self, key: Key, done: asyncio.Task[None]) -> None:
        if self._later.get(key) is done:
            del self._later[key]

    async def take(
        self,
        cwd: str,
        commands: Sequence[tuple[str, ...]],
        argv_for: Callable[[str], list[str]],
        env: Mapping[str, str],
    ) -> tuple[asyncio.subprocess.Process, str] | None:
        """The jail waiting for these directory and commands, and its nonce, when it is the one
        ``argv_for`` (given a nonce) would start now with ``env``; else None (and that one is
        stopped). One being started for the same is waited for (bounded: its spawn)."""
        key = (cwd, tuple(commands))
        if (starting := self._starting.get(key)) is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(starting), STOP_S)
        waiting = self._waiting.pop(key, None)
        if waiting is None:
            return None
        if (
            _same(waiting, cwd, commands, env)
            and tuple(argv_for(waiting.token)) == waiting.argv
            and _identities(waiting.argv) == waiting.identities
        ):
            return waiting.proc, waiting.token
        self._stop(waiting)
        return None

    async def prepare(
        self,
        cwd: str,
        commands: Sequence[tuple[str, ...]],
        argv_for: Callable[[str], list[str]],
        env: Mapping[str, str],
        spawn: Spawn,
    ) -> None:
        """Start the jail the next ``take`` with these would use (unless one waits already)."""
        key = (cwd, tuple(commands))
        waiting = self._waiting.get(key)
        token = waiting.token if waiting is not None else gitsession.nonce()
        argv = argv_for(token)
        if waiting is not None:
            if _same(waiting, cwd, commands, env) and tuple(argv) == waiting.argv:
                self._waiting[key] = self._waiting.pop(key)  # wanted again: the newest
                return
            del self._waiting[key]
            self._stop(waiting)
            token = gitsession.nonce()
            argv = argv_for(token)
        identities = _identities(argv)
        ended = self._starting[key] = asyncio.get_running_loop().create_future()
        try:
            proc = await self._spawned(spawn(argv, env))
            if (other := self._waiting.pop(key, None)) is not None:  # one more ended meanwhile
                self._stop(other)
            env_items = tuple(sorted(env.items()))
            self._waiting[key] = Waiting(
                cwd, key[1], token, tuple(argv), env_items, proc, time.monotonic(), identities
            )
            while len(self._waiting) > self._slots:
                self._stop(self._waiting.pop(next(iter(self._waiting))))
        finally:
            ended.set_result(None)
            if self._starting.get(key) is ended:
                del self._starting[key]

    async def _spawned(
        self, spawning: Awaitable[asyncio.subprocess.Process]
    ) -> asyncio.subprocess.Process:
        """The jail's process, its creation never cancelled: Python 3.11's asyncio can wait
        forever for a process whose creation was cancelled (seen at a bot's close: its warm
        jail's start cancelled, the close waited 30 s and more). Cancelled meanwhile, the
        process is stopped once it is made."""
        made = asyncio.ensure_future(spawning)
        self._spawning.add(made)
        made.add_done_callback(self._spawning.discard)
        try:
            return await asyncio.shield(made)
        except asyncio.CancelledError:
            made.add_done_callback(self._stop_made)
            raise

    def _stop_made(self, made: asyncio.Future[asyncio.subprocess.Process]) -> None:
        if not made.cancelled() and made.exception() is None:
            self._stop_proc(made.result())

    async def aclose(self) -> None:
        later = list(self._later.values())
        for pending in later:
            pending.cancel()
        await asyncio.gather(*later, return_exceptions=True)
        if self._spawning:  # a creation goes on (``_spawned``): bounded by the spawn itself
            await asyncio.wait(self._spawning, timeout=STOP_S)
            await asyncio.sleep(0)  # their stops (``_stop_made``) are under way
        waiting, self._waiting = self._waiting, {}
        for each in waiting.values():
            self._stop(each)
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)

    def _stop(self, waiting: Waiting) -> None:
        self._stop_proc(waiting.proc)

    def _stop_proc(self, proc: asyncio.subprocess.Process) -> None:
        task = asyncio.ensure_future(ended_waiting(proc, STOP_S))
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)


def _same(
    waiting: Waiting, cwd: str, commands: Sequence[tuple[str, ...]], env: Mapping[str, str]
) -> bool:
    return (
        waiting.proc.returncode is None
        and time.monotonic() - waiting.started < gitsession.WAIT_S - MARGIN_S
        and waiting.cwd == cwd
        and waiting.commands == tuple(commands)
        and waiting.env == tuple(sorted(env.items()))
    )


def _identities(argv: Sequence[str]) -> tuple[tuple[str, tuple[int, int] | None], ...]:
    """(device, inode) of every absolute path among a jail's arguments, None where none is."""
    found: list[tuple[str, tuple[int, int] | None]] = []
    for arg in argv:
        if arg.startswith("/"):
            try:
                info = os.lstat(arg)
                found.append((arg, (info.st_dev, info.st_ino)))
            except (OSError, ValueError):
                found.append((arg, None))
    return tuple(found)


async def _after(delay_s: float, start: Callable[[], Awaitable[None]]) -> None:
    await asyncio.sleep(delay_s)
    with contextlib.suppress(OSError):  # no jail ahead: the next one starts as usual
        await start()
