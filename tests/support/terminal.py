"""A command driven as a person at a terminal would: it prints, the test waits for a text, types
a line; every wait bounded."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path


class Terminal:
    """``python -m bot <args>`` with ``env`` in ``cwd``, its stdout and stderr read as one."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.seen = ""

    @classmethod
    async def start(cls, cwd: Path, env: dict[str, str], *args: str) -> Terminal:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "bot", *args),
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        return cls(proc)

    async def until_printed(self, text: str) -> None:
        async with asyncio.timeout(60):
            while text not in self.seen:
                chunk = await self.proc.stdout.read(200)  # type: ignore[union-attr]
                assert chunk, f"ended before printing {text!r}: {self.seen}"
                self.seen += chunk.decode()

    def type(self, line: str) -> None:
        self.proc.stdin.write(f"{line}\n".encode())  # type: ignore[union-attr]

    async def close(self) -> tuple[int, str]:
        """Its input closed, it ends (bounded): its exit code and all it printed."""
        self.proc.stdin.close()  # type: ignore[union-attr]
        out, _ = await asyncio.wait_for(self.proc.communicate(), 60)
        return self.proc.returncode or 0, self.seen + out.decode()
