"""The card's jail of one turn: the jail the card's reading of the repository takes
(``baseline.prepare``), started at the agent's first event, while it works (the jail reads
nothing before its go): an acting turn's changes and a worktree's Merge are read in it; else the
next turn's baseline takes it. The turn's end waits for its start (bounded: a jail's spawn)."""

from __future__ import annotations

import asyncio
import contextlib

from bot.turns.baseline import prepare
from executors.gitguard import GitGuard


class CardJail:
    """The card's jail of one turn, started once; the turn's end waits for its start."""

    def __init__(self, git: GitGuard, cwd: str, agent: contextlib.AsyncExitStack) -> None:
        self._git, self._cwd, self._agent, self._started = git, cwd, agent, False

    def start(self) -> None:
        if not self._started:
            self._started = True
            started = asyncio.ensure_future(prepare(self._git, self._cwd))
            self._agent.push_async_callback(_joined, started)


async def _joined(started: asyncio.Future[None]) -> None:
    """A background start of the turn's, over before its agent's block ends (bounded: a
    jail's spawn); its failure is only that: the card's jail starts as usual."""
    await asyncio.gather(started, return_exceptions=True)
