"""What a stalled test waits on: shortly before its time-out, the event loop's tasks are
printed, each with the chain of awaits it is suspended in (pytest-timeout's own dump shows the
threads only: a stalled await is the loop's ``select`` there)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

MARGIN_S = 6.0  # printed this long before the time-out


@contextlib.contextmanager
def shown_before(timeout_s: float) -> Iterator[None]:
    """Arm the print for a test whose time-out is ``timeout_s`` (0: none, nothing armed)."""
    if timeout_s <= MARGIN_S:
        yield
        return
    main = threading.main_thread().ident
    timer = threading.Timer(timeout_s - MARGIN_S, _show, args=(main,))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def _show(thread_id: int | None) -> None:
    loop = _loop_of(sys._current_frames().get(thread_id or 0))
    if loop is None:
        print("stalls: no event loop running in the main thread", file=sys.stderr)
        return
    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
        loop.call_soon_threadsafe(_print_tasks, loop)


def _loop_of(frame: FrameType | None) -> asyncio.AbstractEventLoop | None:
    while frame is not None:
        owner = frame.f_locals.get("self")
        if isinstance(owner, asyncio.AbstractEventLoop):
            return owner
        frame = frame.f_back
    return None


def _print_tasks(loop: asyncio.AbstractEventLoop) -> None:
    tasks = asyncio.all_tasks(loop)
    lines = [f"stalls: {len(tasks)} tasks of the test's loop, {MARGIN_S:.0f} s before its time-out"]
    for task in tasks:
        lines.append(f"- {task.get_name()}: {task.get_coro()!r}")
        lines.extend(f"    {where}" for where in _awaits(task.get_coro()))
    print("\n".join(lines), file=sys.stderr, flush=True)


def _awaits(coro: Any) -> Iterator[str]:
    """Where each coroutine of the chain ``coro`` awaits is suspended, outermost first."""
    for _ in range(64):
        if coro is None:
            return
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "ag_frame", None)
        frame = frame or getattr(coro, "gi_frame", None)
        if frame is not None:
            yield f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}"
        nxt = getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None)
        coro = nxt or getattr(coro, "gi_yieldfrom", None)
