"""What a pre-started ("warm") ``codex app-server`` would save a new task (#54: measured, not
built). Cold: spawn, ``initialize``, ``thread/start``, ``turn/start``, time to
``turn/completed``. Warm: the same process spawned and initialized ``WARM_WAIT_S`` earlier;
timed from ``thread/start`` (a thread names its directory and policy, not its task) to
``turn/completed``. Interleaved pairs against the scripted Responses API on 127.0.0.1."""

from __future__ import annotations

import asyncio
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
from bot.models import ApprovalMode, TurnSpec  # noqa: E402
from executors.codex import CodexExecutor  # noqa: E402
from executors.codex_rpc import Rpc  # noqa: E402
from executors.process import spawn  # noqa: E402
from executors.tree import descendants, stop_tree  # noqa: E402
from tests.support.openai_mock import OpenAIMock  # noqa: E402

PAIRS = int(os.environ.get("BENCH_RUNS", "12"))
WARM_WAIT_S = 3.0
CODEX = "agents/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"


async def initialized(argv: list[str], work: Path, env: dict[str, str]) -> tuple[Rpc, object]:
    proc = await spawn(argv, str(work), env)
    rpc = Rpc(proc)
    client = {"name": "detach", "title": None, "version": "0.1"}
    caps = {"experimentalApi": False, "requestAttestation": False}
    await rpc.request("initialize", {"clientInfo": client, "capabilities": caps})
    await rpc.notify("initialized")
    return rpc, proc


async def turn(rpc: Rpc, work: Path, text: str) -> None:
    policy = {"approvalPolicy": "never"}  # readonly mode's (executors/codex.py)
    thread = await rpc.request("thread/start", {"cwd": str(work), **policy})
    body = [{"type": "text", "text": text, "text_elements": []}]
    await rpc.request("turn/start", {"threadId": thread["thread"]["id"], "input": body})
    async with asyncio.timeout(60):
        async for message in rpc.incoming():
            if message.get("method") == "turn/completed":
                return
    raise AssertionError("codex ended without completing the turn")


RSS: list[float] = []  # an idle warm app-server's tree, MiB


def tree_rss_mib(pid: int) -> float:
    procs = [psutil.Process(pid), *(psutil.Process(p.pid) for p in descendants(pid))]
    return sum(p.memory_info().rss for p in procs) / 2**20


async def one(argv: list[str], work: Path, env: dict[str, str], n: int, warm: bool) -> float:
    start = time.perf_counter()
    rpc, proc = await initialized(argv, work, env)
    if warm:
        await asyncio.sleep(WARM_WAIT_S)
        RSS.append(tree_rss_mib(proc.pid))  # type: ignore[attr-defined]
        start = time.perf_counter()
    await turn(rpc, work, f"WARM-CODEX {n}")
    elapsed = time.perf_counter() - start
    await rpc.aclose()
    await stop_tree(proc, 5.0)  # type: ignore[arg-type]
    return elapsed


async def main() -> None:
    codex = os.environ.get("DETACH_TEST_CODEX_BIN") or str(ROOT / CODEX)
    mock = OpenAIMock().start()
    mock.script("WARM-CODEX", [{"text": "benchmark answer"}])
    with tempfile.TemporaryDirectory() as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        work.mkdir()
        mock.write_codex_home(home / ".codex")
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "CODEX_HOME": str(home / ".codex"),
            "LANG": "C.UTF-8",
            "MOCK_API_KEY": "sk-test",
            "NO_PROXY": "127.0.0.1",
        }
        spec = TurnSpec(0, 0, "", work, approval_mode=ApprovalMode.READONLY)
        argv = CodexExecutor(codex, env).argv(spec)
        cold, warm = [], []
        for n in range(PAIRS):
            cold.append(await one(argv, work, env, n, warm=False))
            warm.append(await one(argv, work, env, n, warm=True))
    mock.stop()
    c, w = statistics.median(cold), statistics.median(warm)
    print(f"codex cold text turn (spawn -> turn/completed), median of {PAIRS}: {c:.3f} s")
    print(f"codex warm text turn (thread/start -> turn/completed), median of {PAIRS}: {w:.3f} s")
    print(f"a warm app-server would save {1000 * (c - w):.0f} ms, {(c - w) / c:.1%}")
    print(f"an idle warm app-server's tree: {statistics.median(RSS):.0f} MiB RSS")
    note = f"cold {c:.3f} s, warm {w:.3f} s (measured only: not built)"
    record(Figure("a warm codex app-server's saving", 100 * (c - w) / c, "%", note=note))


if __name__ == "__main__":
    asyncio.run(main())
