"""An agent's process chain started ahead (issue #54): before an agent runs, its spawn starts
``nice``, ``setpriv`` and bubblewrap's PID namespace (``process.spawn``), ~5 ms of the ~7 a
cold spawn takes until the agent's own first instruction, none of it depending on the task.
So one chain is started ahead and waits at its end, in a small Perl program (the ``gate``),
for the next agent's directory, binary, argv and environment on its stdin; given them, it
changes to the directory and execs the binary with exactly that argv and environment, and
the pipes become the agent's, as a cold spawn's would.

Used only for a spawn that would start the same chain now: the same ``nice``, not
``contained`` (an argv with its own sandbox: cold, as before), a binary found on absolute PATH
entries and a directory that exist, a ``PWD`` bubblewrap would not keep (else the cold spawn
does what it does). The gate says it entered the directory (one byte on stdout) before it
execs; a chain that does not within ``ACK_S`` (dead, or the directory gone) is killed and the
spawn is cold. Nothing of a task is in a waiting chain: its environment is this run's mark
(``RUN_ENV``, which the watchdog stops) and bubblewrap's ``PWD=/``, and it ends by itself after
``WAIT_S`` (an alarm cancelled at the exec). Only in the PID namespace (``executors.pidns``),
where no other agent sees its stdin, and not with a setuid bubblewrap (glibc would clear
variables of the cold spawn's that the gate sets). Perl is Debian's ``perl-base``
(essential); where it is missing every spawn is cold. The gate leaves the signal dispositions,
the signal mask and the descriptors as a cold spawn has them (tested)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import stat
import time
from collections.abc import Mapping, Sequence

from executors import pidns
from executors.process import LINE_LIMIT, chain, created
from executors.procs import RUN_ENV, this_run
from executors.tree import ended_waiting

log = logging.getLogger(__name__)

WAIT_S = 600  # a waiting chain ends by itself then
MARGIN_S = 60.0  # one this close to its end is not taken
STOP_S = 5.0
ACK_S = 5.0  # how long a gate may take to say it entered the directory
ACK = b"+"
# stdin: a 4-byte length, then NUL-separated: directory, binary, argc, argv..., NAME=VALUE...
GATE = r"""
use strict; alarm($ARGV[0]);
sub need { my ($n) = @_; my $b = '';
  while (length($b) < $n) { my $r = sysread(STDIN, $b, $n - length($b), length($b));
    exit 0 unless $r; }
  return $b; }
my @f = split(/\0/, need(unpack('N', need(4))), -1);
my ($dir, $exe, $argc) = splice(@f, 0, 3); my @argv = splice(@f, 0, $argc);
chdir($dir) or do { print STDERR "detach: cannot enter $dir: $!\n"; exit 127 };
%ENV = map { split(/=/, $_, 2) } @f; alarm(0); syswrite(STDOUT, "+") == 1 or exit 127;
{ exec { $exe } @argv; } print STDERR "detach: cannot run $exe: $!\n"; exit 127;
"""


class SpawnAhead:
    """At most one chain waiting (for the ``nice`` last spawned), ``wait_s`` at most."""

    def __init__(self, perl: str | None = None, wait_s: int = WAIT_S) -> None:
        self._perl = perl if perl is not None else shutil.which("perl")
        self._wait_s = wait_s
        self._waiting: tuple[int, float, asyncio.subprocess.Process] | None = None
        self._starting: asyncio.Task[None] | None = None
        self._stopping: set[asyncio.Task[None]] = set()
        self._closed = False
        self.given: asyncio.subprocess.Process | None = None  # the last chain given an agent

    @property
    def usable(self) -> bool:
        return self._perl is not None and not self._closed and _namespaced()

    async def run(
        self, argv: Sequence[str], cwd: str, env: Mapping[str, str], nice: int
    ) -> asyncio.subprocess.Process | None:
        """The waiting chain, running ``argv`` in ``cwd`` with exactly ``env``; None when none
        waits that a cold spawn of these would equal (then spawn cold). Another is started
        for the next spawn once the gate answered. Cancelled, the chain is killed."""
        if not self.usable:
            return None
        header = _header(argv, cwd, env)
        if header is None:
            return None  # the waiting chain stays for the next spawn
        proc = self._take(nice)
        if proc is None:
            self._replenish(nice)
            return None
        try:
            answered = await _answered(proc, header)
        except BaseException:
            self._kill(proc)
            raise
        finally:  # the next one starts once this agent is on its way (its fork is not on it)
            self._replenish(nice)
        if not answered:
            log.warning("the agent chain started ahead did not answer: a cold spawn")
            self._kill(proc)
            return None
        self.given = proc
        return proc

    def _take(self, nice: int) -> asyncio.subprocess.Process | None:
        """The waiting chain, if it is one for ``nice``, alive and young enough (else it is
        stopped)."""
        waiting, self._waiting = self._waiting, None
        if waiting is None:
            return None
        made_for, started, proc = waiting
        if (
            made_for != nice
            or proc.returncode is not None
            or time.monotonic() - started > self._wait_s - min(MARGIN_S, self._wait_s / 2)
            or proc.stdin is None
            or proc.stdout is None
        ):
            self._stop(proc)
            return None
        return proc

    def _replenish(self, nice: int) -> None:
        if self._starting is None or self._starting.done():
            self._starting = asyncio.ensure_future(self._start(nice))

    async def _start(self, nice: int) -> None:
        assert self._perl is not None
        try:
            proc = await created(
                asyncio.create_subprocess_exec(
                    *chain(nice),
                    self._perl,
                    "-e",
                    GATE,
                    str(self._wait_s),
                    cwd="/",
                    env={RUN_ENV: this_run()},
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE,
                    start_new_session=True,
                    limit=LINE_LIMIT,
                )
            )
        except OSError as exc:
            log.warning("no agent chain started ahead: %s", exc)
            return
        if self._closed or self._waiting is not None:
            self._stop(proc)
            return
        self._waiting = (nice, time.monotonic(), proc)

    async def settled(self) -> None:
        """Once the chain being started (if any) waits, or failed to start."""
        if self._starting is not None:
            await asyncio.shield(self._starting)

    @property
    def waiting(self) -> asyncio.subprocess.Process | None:
        return self._waiting[2] if self._waiting is not None else None

    def _stop(self, proc: asyncio.subprocess.Process) -> None:
        self._track(asyncio.ensure_future(ended_waiting(proc, STOP_S)))

    def _kill(self, proc: asyncio.subprocess.Process) -> None:
        """A chain that may have started an agent: the outer bubblewrap killed, the namespace
        with it (its init dies with its parent)."""
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        self._track(asyncio.ensure_future(ended_waiting(proc, STOP_S)))

    def _track(self, task: asyncio.Task[None]) -> None:
        self._stopping.add(task)
        task.add_done_callback(self._stopping.discard)

    async def aclose(self) -> None:
        """The waiting chain ends (and one being started, once made)."""
        self._closed = True
        if self._starting is not None:
            self._starting.cancel()  # ``created`` stops a process made meanwhile
            await asyncio.gather(self._starting, return_exceptions=True)
        waiting, self._waiting = self._waiting, None
        if waiting is not None:
            self._stop(waiting[2])
        if self._stopping:
            await asyncio.gather(*self._stopping, return_exceptions=True)


async def _answered(proc: asyncio.subprocess.Process, header: bytes) -> bool:
    """``header`` given to the gate, which says (within ACK_S) it entered the directory."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(header)
    try:
        async with asyncio.timeout(ACK_S):
            return await proc.stdout.readexactly(len(ACK)) == ACK
    except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
        return False


@functools.cache
def _namespaced() -> bool:
    """The chain has the PID namespace, of a bubblewrap that is not setuid."""
    found = pidns.prefix()
    try:
        return bool(found) and not os.stat(found[0]).st_mode & stat.S_ISUID
    except OSError:
        return False


def _header(argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> bytes | None:
    """What the gate reads; None where a cold spawn might differ: a binary not found on
    ``env``'s PATH or found through a relative entry, a directory that is none, a ``PWD``
    naming the directory through a link (bubblewrap keeps it; else it sets the real path,
    as the gate does), a NUL, a bad name, more than a quarter of the argument space."""
    if not argv or not os.path.isabs(cwd) or not os.path.isdir(cwd):
        return None
    if "/" in argv[0]:
        if not os.path.isabs(argv[0]):
            return None  # found from the agent's directory
    elif not all(os.path.isabs(p) for p in env.get("PATH", os.defpath).split(os.pathsep)):
        return None  # searched from the agent's directory
    exe = shutil.which(argv[0], path=env.get("PATH", os.defpath))
    if exe is None:
        return None
    real, given = os.path.realpath(cwd), env.get("PWD")
    if given is not None and given != real and _same_dir(given, cwd):
        return None
    pairs = [f"{name}={value}" for name, value in {**env, "PWD": real}.items()]
    fields = [cwd, exe, str(len(argv)), *argv, *pairs]
    if any("\0" in f for f in fields) or any(not n or "=" in n for n in env):
        return None
    try:
        body = b"\0".join(os.fsencode(f) for f in fields)
    except UnicodeError:
        return None
    if len(body) > os.sysconf("SC_ARG_MAX") // 4:
        return None  # near the kernel's limit: the cold spawn says what it says
    return len(body).to_bytes(4, "big") + body


def _same_dir(path: str, cwd: str) -> bool:
    try:
        return os.path.isabs(path) and os.path.samefile(path, cwd)
    except OSError:
        return False
