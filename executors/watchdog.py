"""The agents' watchdog: a small process started with the bot (and with each worker) that
outlives it only to stop every process it started, once it is gone however it went
(``kill -9``, the OOM killer, a crash) and with nobody (systemd) to clean up.

Each agent's leader gets SIGKILL as its parent-death signal (``executors.process``), and
where bubblewrap works every agent runs in a PID namespace that dies with the bot
(``executors.pidns``): what it forked and detached dies with it, whatever it did to its
environment. Without one, what it forked and detached (a tool in its own session, a
double-forked daemon) has no parent-death signal of its own; each such process that kept its
environment carries RUN_ENV, the bot process's ``<pid>.<start time>``: when the bot dies, the
watchdog kills each process carrying it, scan after scan until a scan finds none (a process
forking meanwhile is found by the next). One that cleared its environment is not found.

The bot holds the write end of the watchdog's stdin, and nothing else does (pipes are not
inherited: every child is started with ``close_fds``). The bot dying closes it: the watchdog
reads end-of-file and sweeps. A clean stop writes ``stop`` first (its agents were stopped the
graceful way, SIGINT first): the watchdog exits without a sweep. The watchdog runs in a session
of its own and ignores SIGINT, SIGTERM and SIGHUP (a terminal's Ctrl-C, systemd's stop): only
that end-of-file ends it. It imports ``executors.procs`` alone: 13.6 MB of RSS, 7.4 MB of it its
own (20 MB with asyncio), started once (its Popen 0.2 ms; ~25 ms of CPU in its own process).
A front bot runs no agents and starts none."""

from __future__ import annotations

import contextlib
import logging
import signal
import subprocess
import sys
import time

from executors.procs import RUN_ENV, kill_tagged

log = logging.getLogger(__name__)
STOP = b"stop\n"
MAX_SCANS = 50  # a tree that forks faster than it is killed still ends (bounded)
SCAN_PAUSE_S = 0.02
CLOSE_WAIT_S = 5.0


class Watchdog:
    """The watchdog process of the current process, for the agents carrying RUN_ENV = ``run``."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    @classmethod
    def start(cls, run: str) -> Watchdog:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-m", "executors.watchdog", run],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        log.info("agents' watchdog pid %s watches run %s", proc.pid, run)
        return cls(proc)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def close(self) -> None:
        """A clean stop: no sweep (the agents were stopped, SIGINT first); waits (bounded)."""
        stdin = self._proc.stdin
        if stdin is not None:
            with contextlib.suppress(OSError):  # it died: nothing to tell
                stdin.write(STOP)
                stdin.flush()
            with contextlib.suppress(OSError):
                stdin.close()
        try:
            self._proc.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def sweep(run: str) -> int:
    """Kill every process carrying RUN_ENV = ``run``, until a scan finds none; how many."""
    total = 0
    for _ in range(MAX_SCANS):
        killed = kill_tagged(run, exact=True, name=RUN_ENV)
        if not killed:
            break
        total += killed
        time.sleep(SCAN_PAUSE_S)
    return total


def main(run: str) -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    told = sys.stdin.buffer.read()  # until the bot closes its end, or dies
    if told.startswith(STOP):
        return 0
    killed = sweep(run)
    owner = run.partition(".")[0]
    print(
        f"detach watchdog: pid {owner} is gone; stopped {killed} agent process(es)", file=sys.stderr
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
