"""What a pre-started ("warm") claude would save a new task (issue: DETACH_WARM_AGENTS).

The CLI as the bot runs it takes its prompt as stream-json on stdin. Cold: spawn, write the
prompt at once, time to the result line (what a new task waits today). Warm: spawn, let it
start (``WARM_WAIT_S``), then write the prompt and time from that write to the result line
(what a task would wait if the process had been started before it came). Interleaved pairs
against the scripted model on 127.0.0.1; prints both medians and the saving as a share of the
cold turn. Under 10 % of a text turn, the issue says: write it down and do not ship. Then the
same through the bot's executor (``executors.warm``: the key computed, the warm process taken),
and the memory (RSS) of an idle warm claude's whole tree."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import Figure, record  # noqa: E402
from bot.events import TurnFinished  # noqa: E402
from bot.models import ApprovalMode, TurnSpec  # noqa: E402
from executors.claude import ClaudeExecutor  # noqa: E402
from executors.process import QUIET_ENV  # noqa: E402
from executors.tree import descendants  # noqa: E402
from executors.warm import WarmPool  # noqa: E402
from tests.support.anthropic_mock import AnthropicMock  # noqa: E402

PAIRS = int(os.environ.get("BENCH_RUNS", "16"))
WARM_WAIT_S = 3.0
ARGS = ("-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose")


def message(text: str) -> bytes:
    line = {
        "type": "user",
        "message": {"role": "user", "content": [{"type": "text", "text": text}]},
    }
    return (json.dumps(line) + "\n").encode()


async def turn(claude: str, env: dict[str, str], cwd: Path, text: str, warm: bool) -> float:
    spawned = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        claude,
        *ARGS,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    if warm:
        await asyncio.sleep(WARM_WAIT_S)
    start = time.perf_counter() if warm else spawned
    proc.stdin.write(message(text))
    await proc.stdin.drain()
    elapsed = None
    async with asyncio.timeout(60):
        while line := await proc.stdout.readline():
            if b'"type":"result"' in line:
                elapsed = time.perf_counter() - start
                proc.stdin.close()
        await proc.wait()
    assert elapsed is not None, "claude ended without a result"
    return elapsed


class _Deny:
    async def decide(self, request: object) -> object:
        raise AssertionError("a text turn asks nothing")


async def executor_turn(executor: ClaudeExecutor, work: Path, n: int) -> float:
    """A turn through the bot's executor, from ``run`` to its result."""
    spec = TurnSpec(n, n, f"WARM-BENCH e{n}", work, approval_mode=ApprovalMode.ASK)
    start, elapsed = time.perf_counter(), None
    async for event in executor.run(spec, _Deny()):  # type: ignore[arg-type]
        if isinstance(event, TurnFinished):
            elapsed = time.perf_counter() - start
    assert elapsed is not None, "no result"
    return elapsed


def tree_rss_mib(pid: int) -> float:
    procs = [psutil.Process(pid), *(psutil.Process(p.pid) for p in descendants(pid))]
    return sum(p.memory_info().rss for p in procs) / 2**20


async def through_executor(claude: str, env: dict[str, str], work: Path) -> None:
    """Cold and warm turns as the bot runs them; the idle warm tree's RSS."""
    pool = WarmPool()
    cold_executor = ClaudeExecutor(claude, env)
    warm_executor = ClaudeExecutor(claude, env, warm=pool)
    await executor_turn(warm_executor, work, 0)  # the first start: warm from now on
    cold, warm, rss = [], [], []
    for n in range(1, PAIRS + 1):
        cold.append(await executor_turn(cold_executor, work, n))
        async with asyncio.timeout(60):
            while pool.held_pid is None:
                await asyncio.sleep(0.05)
        await asyncio.sleep(WARM_WAIT_S)  # started, idle: as the next task would find it
        rss.append(tree_rss_mib(pool.held_pid))
        warm.append(await executor_turn(warm_executor, work, n))
    await pool.aclose()
    assert pool.counts.taken == PAIRS, pool.counts
    c, w, m = statistics.median(cold), statistics.median(warm), statistics.median(rss)
    print(f"executor cold turn (run -> result), median of {PAIRS}: {c:.3f} s")
    print(f"executor warm turn (run -> result), median of {PAIRS}: {w:.3f} s")
    print(f"an idle warm claude's tree: {m:.0f} MiB RSS (median of {PAIRS})")
    record(
        Figure(
            "a warm claude's saving through the executor",
            100 * (c - w) / c,
            "%",
            10.0,
            at_most=False,
            note=f"cold {c:.3f} s, warm {w:.3f} s (key, take, prompt -> result)",
        )
    )
    record(Figure("an idle warm claude's memory (RSS, whole tree)", m, "MiB"))


async def main() -> None:
    claude = os.environ.get("DETACH_TEST_CLAUDE_BIN") or str(
        ROOT / "agents/node_modules/.bin/claude"
    )
    mock = AnthropicMock().start()
    mock.script("WARM-BENCH", [{"text": "benchmark answer"}])
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            **mock.env(),
            **QUIET_ENV,
        }
        cold, warm = [], []
        for n in range(PAIRS):
            cold.append(await turn(claude, env, work, f"WARM-BENCH c{n}", warm=False))
            warm.append(await turn(claude, env, work, f"WARM-BENCH w{n}", warm=True))
        await through_executor(claude, env, work)
    mock.stop()
    c, w = statistics.median(cold), statistics.median(warm)
    saving = (c - w) / c
    print(f"cold text turn (spawn -> result), median of {PAIRS}: {c:.3f} s")
    print(f"warm text turn (prompt written -> result), median of {PAIRS}: {w:.3f} s")
    print(f"a warm agent saves {1000 * (c - w):.0f} ms, {saving:.1%} of a cold text turn")
    record(
        Figure(
            "a warm claude's saving on a text turn",
            100 * saving,
            "%",
            10.0,
            at_most=False,
            note=f"cold {c:.3f} s, warm {w:.3f} s (the issue ships it at 10 % or more)",
        )
    )


if __name__ == "__main__":
    asyncio.run(main())
