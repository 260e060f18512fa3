"""A misbehaving stand-in for the claude CLI (stream-json in and out), for fault drills.

It reads the first stdin line (the prompt message) and acts on a word in the prompt:

- ``HANG``: starts a session, then runs until killed; ``STUBBORN`` also ignores SIGINT/SIGTERM.
- ``DAEMON``: double-forks a daemon in its own session (argv ends with ``fake-daemon-<tag>``),
  then answers and exits (with ``HANG``: runs on instead).
- ``HOLDOUT``: leaves a child in its own session holding stdout and stderr, answers, exits.
- ``NOEXIT``: answers, then ignores the closed stdin and runs on.
- ``GARBAGE``: oddly shaped lines between a session start and a valid answer.
- ``BADSESSION``: a session id that is not a UUID.
- ``HUGE``: one line longer than the executor's 32 MiB limit.
- ``NAP``: answers after 1.5 s.
- ``RECORD``: with ``HANG``, writes the name of the first signal it gets (SIGINT, SIGTERM) to
  ``$HOME/signals.log``, then exits; ``$HOME/signals.ready`` appears once it listens.
- anything else: answers at once.

Use ``script(dir)`` for an executable that runs it with this interpreter.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

SESSION = "6b0e1f4c-5a8e-4a8f-9d3c-1a2b3c4d5e6f"
DAEMON_CODE = "import time\nwhile True: time.sleep(1)"


def script(directory: Path) -> str:
    path = directory / "fake-claude"
    root = str(Path(__file__).resolve().parents[2])
    path.write_text(
        f"#!{sys.executable}\nimport runpy, sys\nsys.path.insert(0, {root!r})\n"
        "runpy.run_module('tests.support.fake_claude', run_name='__main__')\n"
    )
    path.chmod(0o755)
    return str(path)


def emit(obj: object) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def init(session: str = SESSION) -> None:
    emit({"type": "system", "subtype": "init", "session_id": session, "model": "fake"})


def result(text: str, session: str = SESSION) -> None:
    emit(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": text,
            "session_id": session,
            "total_cost_usd": 0.001,
            "usage": {"input_tokens": 3, "output_tokens": 4},
            "num_turns": 1,
        }
    )


def spawn_detached(label: str, hold_pipes: bool) -> None:
    """Fork twice; the grandchild starts a new session and becomes the long-lived process."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            if not hold_pipes:
                devnull = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(devnull, fd)
            os.execv(sys.executable, [sys.executable, "-c", DAEMON_CODE, label])
        os._exit(0)
    os.wait()


def _record(signum: int, _frame: object) -> None:
    with open(Path(os.environ["HOME"]) / "signals.log", "a") as log:
        log.write(signal.Signals(signum).name + "\n")
    os._exit(0)


def run_forever() -> None:
    while True:
        time.sleep(1)


def main() -> None:
    if "--version" in sys.argv:
        print("2.1.197 (Claude Code)")
        return
    first = json.loads(sys.stdin.readline() or "{}")
    prompt = str((first.get("message") or {}).get("content") or "")
    tag = os.environ.get("DETACH_AGENT_TAG", "untagged")
    if "RECORD" in prompt:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, _record)
        (Path(os.environ["HOME"]) / "signals.ready").touch()
    if "STUBBORN" in prompt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if "BADSESSION" in prompt:
        init("../../etc/passwd; rm -rf")
        result("answer with a bad session", "../../etc/passwd; rm -rf")
        return
    init()
    if "DAEMON" in prompt or "HOLDOUT" in prompt:
        spawn_detached(f"fake-daemon-{tag}", hold_pipes="HOLDOUT" in prompt)
    if "HANG" in prompt or "STUBBORN" in prompt:
        run_forever()
    if "GARBAGE" in prompt:
        for line in (
            '{"type":"user","message":"x"}',
            '{"type":"assistant","message":{"content":["text", 5, null]}}',
            '{"type":"assistant","message":{"content":[{"type":"tool_use","input":"rm -rf /"}]}}',
            '{"type":"system","subtype":"init","session_id":{"a":1}}',
            "[1, 2, 3]",
            "not json at all \x00\x01",
        ):
            sys.stdout.write(line + "\n")
        emit(
            {
                "type": "result",
                "subtype": "success",
                "is_error": False,
                "usage": "lots",
                "result": "the valid answer after garbage",
                "session_id": SESSION,
                "total_cost_usd": "free",
                "errors": "x",
                "permission_denials": "none",
            }
        )
        return
    if "HUGE" in prompt:
        chunk = "x" * (1 << 20)
        sys.stdout.write('{"type":"assistant","message":{"content":[{"type":"text","text":"')
        for _ in range(33):
            sys.stdout.write(chunk)
        sys.stdout.write('"}]}}\n')
        sys.stdout.flush()
        result("never read")
        return
    if "NAP" in prompt:
        time.sleep(1.5)
    result(f"fake answer to: {prompt[:60]}")
    if "NOEXIT" in prompt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        run_forever()


if __name__ == "__main__":
    main()
