"""How long an agent waits for its Detach tools (issue #55: the owner tools cost a Claude turn
seconds of `detach mcp` start-up): from the server's start to its answer to ``tools/list``,
a plain `detach mcp --task N` against the relay handing it to the MCP zygote (bot.zygote), a
fresh fork and one forked ahead (as the bot asks while it spawns the agent; the agent's CLI
starts its server about half a second later), interleaved on one SQLite file; prints the
medians and the ratios."""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import Figure, record  # noqa: E402
from bot.mcp.launch import mcp_command, subtask_env  # noqa: E402
from tests.test_mcp_ahead import _ask_ahead  # noqa: E402
from tests.test_mcp_zygote import _a_task, _settings, _tools, zygote  # noqa: E402

RUNS = int(os.environ.get("BENCH_RUNS", "8"))
AHEAD_LEAD_S = 0.5  # the bot asks as it spawns the agent; the CLI starts its server ~0.5 s later


async def _once(command: tuple[str, ...], env: dict[str, str], cwd: Path) -> float:
    began = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *command,
        env=env,
        cwd=str(cwd),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        await _tools(proc)
        return time.perf_counter() - began
    finally:
        proc.kill()
        await proc.wait()


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        settings = _settings(Path(tmp))
        task_id = await _a_task(settings)
        plain: list[float] = []
        forked: list[float] = []
        ahead: list[float] = []
        env = subtask_env(settings)
        args = ("--task", str(task_id))
        before = (sys.executable, "-m", "bot", "mcp", *args)  # the command agents had
        async with zygote(settings):
            for _ in range(RUNS):
                plain.append(await _once(before, env, settings.data_dir))
                forked.append(await _once((*mcp_command(), *args), env, settings.data_dir))
                _ask_ahead(settings, ["mcp", *args], env, settings.data_dir)
                await asyncio.sleep(AHEAD_LEAD_S)
                ahead.append(await _once((*mcp_command(), *args), env, settings.data_dir))
    p, f, a = (statistics.median(s) for s in (plain, forked, ahead))
    print(
        f"detach mcp to tools/list: plain {p * 1000:.0f} ms, from the zygote {f * 1000:.0f} ms, "
        f"forked ahead {a * 1000:.0f} ms"
    )
    print(f"  ratio {f / p:.3f} ({(1 - f / p) * 100:.0f} % saved), load {os.getloadavg()[0]:.1f}")
    record(
        Figure(
            "MCP server ready, forked ahead (ms)",
            round(a * 1000, 1),
            "ms",
            note=f"{a / f:.2f}x of a fresh fork",
        )
    )
    record(Figure("MCP server ready, plain (ms)", round(p * 1000, 1), "ms"))
    record(
        Figure(
            "MCP server ready, from the zygote (ms)",
            round(f * 1000, 1),
            "ms",
            note=f"{f / p:.2f}x of plain",
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
