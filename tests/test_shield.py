"""``shielded``: clean-up a cancel does not cut short (the agent's tree is stopped in full)."""

from __future__ import annotations

import asyncio

import pytest

from executors.shield import shielded


async def _cleanup(done: list[str], after_s: float = 0.05) -> str:
    await asyncio.sleep(after_s)
    done.append("stopped")
    return "ok"


async def test_a_cancel_during_the_clean_up_waits_for_it_then_is_raised():
    done: list[str] = []
    task = asyncio.create_task(shielded(_cleanup(done)))
    await asyncio.sleep(0.01)
    task.cancel()
    task.cancel()  # twice: a /cancel and a shutdown
    with pytest.raises(asyncio.CancelledError):
        await task
    assert done == ["stopped"]


async def test_a_timeout_during_the_clean_up_still_ends_as_the_timeout():
    done: list[str] = []
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await shielded(_cleanup(done))
    assert done == ["stopped"]


async def test_the_clean_up_s_result_and_error_come_through():
    assert await shielded(_cleanup([], 0)) == "ok"

    async def broken() -> None:
        raise OSError("gone")

    with pytest.raises(OSError, match="gone"):
        await shielded(broken())
