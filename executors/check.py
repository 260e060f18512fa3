"""Running a task's check (``pytest -q``, ``make test``) in its directory after a turn: through
``sh -c``, inside bubblewrap whenever this machine has it (whatever the task's mode: a check is
a command from a repository or an owner's message, never trusted with the whole machine; the
denied paths hidden), bounded in time and stopped with its whole process tree on timeout or
cancel; never with an API key, token or password in its environment."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from bot.models import CheckResult
from executors import sandbox
from executors.denied import without_secrets
from executors.process import agent_env, spawn
from executors.shield import shielded
from executors.tree import stop_tree

log = logging.getLogger(__name__)

OUTPUT_KEEP = 256 * 1024  # the end of a long output is what says why it failed
READ_CHUNK = 64 * 1024


class ShellCheck:
    """The CheckRunner of the composition root (bot/ports.py)."""

    def __init__(
        self,
        environ: Mapping[str, str],
        secrets: Iterable[str],
        timeout_s: float,
        *,
        grace_s: float = 2.0,
        nice: int = 0,
        denied: Callable[[], Iterable[Path]] = tuple,
        confine_always: bool = True,
        hidden: Iterable[str] = (),
    ) -> None:
        """``nice``: how much nicer than the bot the check's processes run; ``denied``: the
        paths a sandboxed check may not read (asked at each run); ``confine_always``: run in
        the sandbox whenever this machine has one, not only when ``run`` is told to (a check:
        yes; /local's ``run`` tool, whose commands the owner approves in ask mode: no);
        ``hidden``: variables it never gets whatever their names (every preset's key)."""
        self._env = without_secrets(agent_env(environ, secrets), hidden)
        self._denied = denied
        self._confine_always = confine_always
        self._timeout_s = timeout_s
        self._grace_s = grace_s
        self._nice = nice

    async def run(
        self, command: str, cwd: Path, sandboxed: bool, round_: int, tag: str | None = None
    ) -> CheckResult:
        argv = ["sh", "-c", command]
        confined = sandboxed or (self._confine_always and await self._sandbox_works())
        if confined:  # its own PID namespace, dying with the bot: no other is needed
            argv = sandbox.confine(argv, cwd, self._env, self._denied())
        started = time.monotonic()
        proc = await spawn(argv, str(cwd), self._env, tag, self._nice, contained=confined)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.close()
        output = bytearray()
        timed_out = False
        try:
            try:
                async with asyncio.timeout(self._timeout_s):
                    await _collect(proc, output)
            except TimeoutError:
                timed_out = True
        finally:
            await shielded(self._stop(proc, tag))  # cancel or timeout: nothing of it runs on
        duration = time.monotonic() - started
        text = output.decode(errors="replace")
        if timed_out:
            text += f"\n[stopped after {self._timeout_s:.0f} s]"
        code = None if timed_out else proc.returncode
        log.info("check %r in %s: rc=%s in %.1f s", command, cwd, code, duration)
        return CheckResult(
            command=command,
            passed=code == 0,
            exit_code=code,
            output=text,
            duration_s=duration,
            round=round_,
            timed_out=timed_out,
        )

    async def _sandbox_works(self) -> bool:
        return await asyncio.to_thread(sandbox.problem, self._env) is None

    async def _stop(self, proc: asyncio.subprocess.Process, tag: str | None) -> None:
        await stop_tree(proc, self._grace_s, signal.SIGTERM, tag)
        await _drain(proc, self._grace_s)


async def _drain(proc: asyncio.subprocess.Process, timeout_s: float) -> None:
    """Read the pipes of a stopped check to their end (bounded), so their transports close now
    and not when the loop is gone."""
    assert proc.stdout is not None and proc.stderr is not None
    with contextlib.suppress(TimeoutError, OSError, ValueError):
        await asyncio.wait_for(asyncio.gather(proc.stdout.read(), proc.stderr.read()), timeout_s)


async def _collect(proc: asyncio.subprocess.Process, output: bytearray) -> None:
    """stdout and stderr, as they come, until both close and the shell exits; only the last
    OUTPUT_KEEP bytes are kept."""
    assert proc.stdout is not None and proc.stderr is not None

    async def pump(stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(READ_CHUNK):
            output.extend(chunk)
            if len(output) > OUTPUT_KEEP:
                del output[: len(output) - OUTPUT_KEEP]

    await asyncio.gather(pump(proc.stdout), pump(proc.stderr))
    with contextlib.suppress(ProcessLookupError):
        await proc.wait()
