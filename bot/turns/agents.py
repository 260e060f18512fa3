"""One agent process of a task at a time in this process: a turn reported while its agent
still exits does not start the next turn's agent (same session) beside it. The wait is bounded
by ``AGENT_EXIT_WAIT_S`` (the agent stop has its own bound)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

AGENT_EXIT_WAIT_S = 30.0  # a previous agent of the task still exiting (its stop is bounded)


class AgentSlots:
    def __init__(self) -> None:
        self._agents: dict[int, asyncio.Future[None]] = {}  # task id -> its agent is gone

    @contextlib.asynccontextmanager
    async def one(self, task_id: int) -> AsyncIterator[None]:
        """Inside: the only agent of ``task_id`` here (the previous one gone, or waited for
        ``AGENT_EXIT_WAIT_S``); the next may start once this block ends."""
        previous = self._agents.get(task_id)
        if previous is not None:
            await asyncio.wait({previous}, timeout=AGENT_EXIT_WAIT_S)
        gone = asyncio.get_running_loop().create_future()
        self._agents[task_id] = gone
        try:
            yield
        finally:
            gone.set_result(None)
            if self._agents.get(task_id) is gone:
                del self._agents[task_id]
