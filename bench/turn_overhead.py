"""How much time Detach adds to an agent turn.

Runs the same one-step text turn N times, interleaved, (a) as `claude -p --output-format
stream-json` spawned directly, the prompt on stdin, timed to its result line (the moment a person
at a terminal has the answer), and (b) through the whole bot: a `/detach` update over HTTP long
polling to the completion message at the fake Bot API server; each both plain (`mode=ask`) and
sandboxed (the CLI's bubblewrap sandbox, the default of /detach). All hit the same scripted model
server on 127.0.0.1. The bot talks to the CLI in stream-json on stdin too (approvals are answered
there); sandboxed, that input format alone makes the CLI start slower, so the sandboxed series
also runs the CLI exactly as the bot does, to tell the CLI's share from the bot's. Prints
medians and the ratios measured in this one run.
"""

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

from bot.models import ApprovalMode, TurnSpec  # noqa: E402
from executors.claude import sandbox_settings  # noqa: E402
from executors.process import QUIET_ENV  # noqa: E402
from tests.support.anthropic_mock import AnthropicMock  # noqa: E402
from tests.support.fake_telegram import FakeTelegram  # noqa: E402
from tests.support.harness import OWNER, make_settings, running_bot  # noqa: E402

RUNS = int(os.environ.get("BENCH_RUNS", "8"))


SANDBOXED = (
    "--permission-mode",
    "acceptEdits",
    "--settings",
    sandbox_settings(TurnSpec(0, 0, "", Path("."), approval_mode=ApprovalMode.SANDBOX)),
)


AS_THE_BOT = ("--input-format", "stream-json", "--permission-prompt-tool", "stdio")


async def direct_turn(
    claude: str, env: dict[str, str], cwd: Path, marker: str, extra: tuple[str, ...] = ()
) -> float:
    """Seconds from spawn to the result line (the CLI then exits, untimed)."""
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        claude,
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        *extra,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    prompt = f"{marker} hi"
    if "stream-json" in extra:
        user = {"role": "user", "content": prompt}
        line = {"type": "user", "parent_tool_use_id": None, "session_id": "", "message": user}
        proc.stdin.write((json.dumps(line) + "\n").encode())
    else:
        proc.stdin.write(prompt.encode())
        proc.stdin.close()
    elapsed = None
    async with asyncio.timeout(60):
        while line_out := await proc.stdout.readline():
            if elapsed is None and b'"type":"result"' in line_out:
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
    keys = ("direct", "bot", "direct_sbx", "direct_sbx_stream", "bot_sbx")
    series: dict[str, list[float]] = {k: [] for k in keys}
    work = tmp / "work"
    async with FakeTelegram() as fake:
        settings = make_settings(tmp / "data", fake, claude, work)
        async with running_bot(settings, env):
            await fake.wait_call("setMyCommands")

            async def via_bot(command: str) -> float:
                mark = len(fake.calls)
                start = time.perf_counter()
                await fake.user_message(command, OWNER)
                await fake.wait_text(OWNER, "benchmark answer", timeout_s=60, after=mark)
                return time.perf_counter() - start

            for i in range(RUNS):  # interleaved, so drift in the machine's speed hits all
                series["direct"].append(await direct_turn(claude, env, work, f"BENCH d {i}"))
                series["bot"].append(await via_bot(f"/detach mode=ask BENCH bot {i}"))
                series["direct_sbx"].append(
                    await direct_turn(claude, env, work, f"BENCH ds {i}", SANDBOXED)
                )
                series["direct_sbx_stream"].append(
                    await direct_turn(claude, env, work, f"BENCH dss {i}", SANDBOXED + AS_THE_BOT)
                )
                series["bot_sbx"].append(await via_bot(f"/detach BENCH sandboxed {i}"))
    mock.stop()
    m = {k: statistics.median(v) for k, v in series.items()}
    print(f"runs: {RUNS}")
    print(f"claude -p direct                  median {m['direct']:.3f}s")
    print(f"/detach mode=ask through bot      median {m['bot']:.3f}s")
    print(f"claude -p direct, sandboxed       median {m['direct_sbx']:.3f}s")
    print(f"  the same, run as the bot runs it median {m['direct_sbx_stream']:.3f}s")
    print(f"/detach (sandboxed) through bot   median {m['bot_sbx']:.3f}s")
    for label, bot, direct in (("ask", "bot", "direct"), ("sandboxed", "bot_sbx", "direct_sbx")):
        paired = statistics.median(b / d for b, d in zip(series[bot], series[direct], strict=True))
        print(
            f"ratio bot/direct ({label}): {m[bot] / m[direct]:.3f}x  "
            f"(overhead {1000 * (m[bot] - m[direct]):.0f} ms per turn; "
            f"median of the {RUNS} paired runs' ratios {paired:.3f}x)"
        )
    print(f"the CLI's own sandbox start-up: {m['direct_sbx'] / m['direct']:.3f}x")
    print(
        "the bot's own share, sandboxed (vs the CLI run as the bot runs it): "
        f"{m['bot_sbx'] / m['direct_sbx_stream']:.3f}x"
    )


if __name__ == "__main__":
    asyncio.run(main())
