"""What a pre-started ("warm") claude would save a new task (issue: DETACH_WARM_AGENTS).

The CLI as the bot runs it takes its prompt as stream-json on stdin. Cold: spawn, write the
prompt at once, time to the result line (what a new task waits today). Warm: spawn, let it
start (``WARM_WAIT_S``), then write the prompt and time from that write to the result line
(what a task would wait if the process had been started before it came). Interleaved pairs
against the scripted model on 127.0.0.1; prints both medians and the saving as a share of the
cold turn. Under 10 % of a text turn, the issue says: write it down and do not ship."""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import Figure, record  # noqa: E402
from executors.process import QUIET_ENV  # noqa: E402
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
