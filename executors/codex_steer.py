"""Steering a Codex turn through ``turn/steer`` (measured with 0.171.0): bound to the running
turn by ``expectedTurnId``, a steer is taken into that turn (its next model request carries
it, with or without a tool call ahead); the app-server refuses it with an error once the turn
has ended ("no active turn to steer") or when the id is another turn's. A refused steer runs as
its own next turn, started by the bot: never attached to another turn."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bot.errors import AgentCrashed
from bot.events import AgentEvent, Steer, SteerDeferred, SteerTaken
from bot.ports import SteerInbox
from executors.codex_rpc import Rpc

log = logging.getLogger(__name__)
STEER_TIMEOUT_S = 10.0
FINISH_WAIT_S = 3.0  # a steer the app-server has not answered when the turn completed


class CodexSteering:
    """Sends a turn's steers as they arrive; what became of each is read by the turn's
    event loop (``said``) and, at the turn's end, ``finished``."""

    def __init__(self, inbox: SteerInbox, rpc: Rpc, thread_id: str, turn_id: str) -> None:
        self._inbox = inbox
        self._rpc = rpc
        self._target = {"threadId": thread_id, "expectedTurnId": turn_id}
        self._said: list[AgentEvent] = []
        self._sending: Steer | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._sender = asyncio.create_task(self._send(), name="codex steer")

    def said(self) -> list[AgentEvent]:
        said, self._said = self._said, []
        return said

    async def _send(self) -> None:
        while True:
            await self._inbox.arrived()
            for steer in self._inbox.take():
                self._sending = steer
                self._idle.clear()
                self._said.append(await self._one(steer))
                self._sending = None
                self._idle.set()

    async def _one(self, steer: Steer) -> AgentEvent:
        text = [{"type": "text", "text": steer.text, "text_elements": []}]
        try:
            await self._rpc.request(
                "turn/steer", {**self._target, "input": text}, timeout_s=STEER_TIMEOUT_S
            )
        except (AgentCrashed, TimeoutError) as exc:
            log.info("codex: steer %s refused (%s): the next turn", steer.steer_id, exc)
            return SteerDeferred(steer.steer_id)
        return SteerTaken(steer.steer_id)

    async def finished(self) -> list[AgentEvent]:
        """The turn completed: a steer in flight gets its answer (bounded); one still waiting
        runs as the next turn."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), FINISH_WAIT_S)
        sending = self._sending
        await self.aclose()
        left = [*([sending] if sending else []), *self._inbox.take()]
        return [*self.said(), *(SteerDeferred(s.steer_id) for s in left)]

    async def aclose(self) -> None:
        self._sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._sender
