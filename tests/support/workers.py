"""Scale-out workers as real processes (`python -m bot worker NAME`) for the fleet tests: start,
kill with their agents (a machine lost), pause (a machine cut off), and where a turn runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import sqlalchemy as sa

from bot.store import Store

ROOT = Path(__file__).resolve().parents[2]
STARTED: set[Worker] = set()  # every worker a test started: reaped after it, whatever happened


@dataclass(eq=False)
class Worker:
    name: str
    env: dict[str, str]
    log: Path
    proc: asyncio.subprocess.Process | None = None
    starts: int = 0
    exits: list[int] = field(default_factory=list)  # exit codes of its earlier processes

    async def start(self) -> None:
        assert self.proc is None or self.proc.returncode is not None
        log = open(self.log, "ab")  # noqa: SIM115 (the child owns it)
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "worker",
            self.name,
            cwd=self.log.parent,
            env=self.env,
            stdout=log,
            stderr=log,
        )
        log.close()
        self.starts += 1
        STARTED.add(self)

    async def ready(self, timeout_s: float = 30) -> None:
        """Until this start of it said it is ready (a crash at start fails here)."""
        async with asyncio.timeout(timeout_s):
            while self.tail(1_000_000).count(" ready: ") < self.starts:
                assert self.alive, self.tail()
                await asyncio.sleep(0.1)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def kill_with_agents(self) -> None:
        """kill -9 of the worker and every process under it, at once: the machine is gone."""
        assert self.proc is not None
        try:
            tree = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            tree = []
        self.proc.kill()
        for child in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                child.kill()
        self.exits.append(await self.proc.wait())

    def pause(self) -> None:
        """SIGSTOP of the worker alone (its agents run on): cut off, not dead."""
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    async def stop(self, timeout_s: float = 30) -> int:
        """SIGTERM, as systemd would; its exit code."""
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout_s)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        assert self.proc.returncode is not None
        return self.proc.returncode

    def tail(self, chars: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""


def worker_env(
    agent_env: dict[str, str],
    url: str,
    data_dir: Path,
    claude_bin: str,
    workdir: Path,
    **extra: str,
) -> dict[str, str]:
    return {
        **agent_env,
        "DETACH_DATABASE_URL": url,
        "DETACH_DATA_DIR": str(data_dir),
        "DETACH_CLAUDE_BIN": claude_bin,
        "DETACH_WORKDIR": str(workdir),
        "DETACH_CANCEL_GRACE_S": "2",
        "PYTHONPATH": str(ROOT),  # this checkout's bot, whichever one the venv installed
        **extra,
    }


async def runner_of(store: Store, task_id: int) -> str | None:
    """The runner of the task's newest turn (``w1@host#xxxxxx``)."""
    async with store.engine.connect() as conn:
        return (
            await conn.execute(
                sa.text("SELECT runner FROM turns WHERE task_id = :t ORDER BY seq DESC LIMIT 1"),
                {"t": task_id},
            )
        ).scalar()


async def wait_until(predicate, timeout_s: float, every_s: float = 0.1) -> None:  # type: ignore[no-untyped-def]
    """Until the (async) predicate holds; TimeoutError after the bound."""
    async with asyncio.timeout(timeout_s):
        while not await predicate():
            await asyncio.sleep(every_s)


def agents_of(tag_prefix: str) -> list[psutil.Process]:
    """Live processes whose DETACH_AGENT_TAG starts with ``tag_prefix``."""
    found = []
    for proc in psutil.process_iter():
        try:
            tag = proc.environ().get("DETACH_AGENT_TAG", "")
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
        if tag.startswith(tag_prefix):
            found.append(proc)
    return found


def reap() -> None:
    """kill -9 of every worker a test left running (its agents too), e.g. after a timeout."""
    for worker in list(STARTED):
        STARTED.discard(worker)
        if worker.proc is None or worker.proc.returncode is not None:
            continue
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(worker.proc.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    child.kill()
            worker.proc.kill()
