"""How much time Detach adds to an agent turn.

Runs the same one-step text turn N times, interleaved, (a) as `claude -p --output-format stream-json` spawned
directly and (b) through the whole bot: a `/detach` update over HTTP long polling to the
completion message at the fake Bot API server. Both hit the same scripted model server on
127.0.0.1, so the ratio is the bot's overhead on top of the CLI's own time. Prints medians and
the ratio measured in this one run.
"""

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

from executors.process import QUIET_ENV  # noqa: E402
from tests.support.anthropic_mock import AnthropicMock  # noqa: E402
from tests.support.fake_telegram import FakeTelegram  # noqa: E402
from tests.support.harness import OWNER, make_settings, running_bot  # noqa: E402

RUNS = int(os.environ.get("BENCH_RUNS", "8"))


async def direct_turn(claude: str, env: dict[str, str], cwd: Path, marker: str) -> float:
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        claude,
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await asyncio.wait_for(proc.communicate(f"{marker} hi".encode()), 60)
    assert b'"type":"result"' in out
    return time.perf_counter() - start


async def main() -> None:
    claude = os.environ.get("DETACH_TEST_CLAUDE_BIN") or str(
        ROOT / "agents/node_modules/.bin/claude"
    )
    mock = AnthropicMock().start()
    tmp = Path(tempfile.mkdtemp(prefix="detach-bench-"))
    (tmp / "home").mkdir()
    (tmp / "work").mkdir()
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(tmp / "home"),
        "LANG": "C.UTF-8",
        **mock.env(),
        **QUIET_ENV,
    }
    mock.script("BENCH", [{"text": "benchmark answer"}])
    direct: list[float] = []
    via_bot: list[float] = []
    async with FakeTelegram() as fake:
        settings = make_settings(tmp / "data", fake, claude, tmp / "work")
        async with running_bot(settings, env):
            await fake.wait_call("setMyCommands")
            for i in range(RUNS):  # interleaved, so drift in the machine's speed hits both
                direct.append(await direct_turn(claude, env, tmp / "work", f"BENCH direct {i}"))
                mark = len(fake.calls)
                start = time.perf_counter()
                await fake.user_message(f"/detach BENCH bot {i}", OWNER)
                await fake.wait_text(OWNER, "benchmark answer", timeout_s=60, after=mark)
                via_bot.append(time.perf_counter() - start)
    mock.stop()
    d, b = statistics.median(direct), statistics.median(via_bot)
    print(f"runs: {RUNS}")
    print(f"claude -p direct      median {d:.3f}s  (min {min(direct):.3f}s)")
    print(f"/detach through bot   median {b:.3f}s  (min {min(via_bot):.3f}s)")
    print(f"ratio bot/direct: {b / d:.3f}x  (overhead {1000 * (b - d):.0f} ms per turn)")


if __name__ == "__main__":
    asyncio.run(main())
