"""Steering a Codex turn through ``turn/steer`` (measured with 0.171.0): bound to the running
turn by ``expectedTurnId``, a steer is taken into that turn (its next model request carries
it, with or without a tool call ahead); the app-server refuses it with an error once the turn
has ended ("no active turn to steer") or when the id is another turn's. A refused steer runs as
its own next turn, started by the bot: never attached to another turn. An accepted one is said
taken in when the turn shows it: the ``userMessage`` item with its words (at the latest when
the turn completes: accepted is in)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

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

    def __init__(
        self,
        inbox: SteerInbox,
        rpc: Rpc,
        thread_id: str,
        turn_id: str,
        timeout_s: float = STEER_TIMEOUT_S,
    ) -> None:
        self._inbox = inbox
        self._timeout_s = timeout_s
        self._rpc = rpc
        self._target = {"threadId": thread_id, "expectedTurnId": turn_id}
        self._said: list[AgentEvent] = []
        self._accepted: list[Steer] = []  # in the turn, its userMessage item not seen yet
        self._unsure: list[Steer] = []  # unanswered within the bound: in only if the turn shows it
        self._seen: set[str] = set()  # words the turn showed while their request was in flight
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
                answer = await self._one(steer)
                if answer is not False and steer.text in self._seen:  # shown while in flight
                    self._said.append(SteerTaken(steer.steer_id))
                elif answer is None:
                    self._unsure.append(steer)
                elif answer:
                    self._accepted.append(steer)
                else:
                    self._said.append(SteerDeferred(steer.steer_id))
                self._sending = None
                self._idle.set()

    async def _one(self, steer: Steer) -> bool | None:
        """True: accepted; False: refused (it runs as the next turn); None: no answer within
        the bound (the app-server may still have taken it: its ``userMessage`` item decides)."""
        text = [{"type": "text", "text": steer.text, "text_elements": []}]
        try:
            await self._rpc.request(
                "turn/steer", {**self._target, "input": text}, timeout_s=self._timeout_s
            )
        except TimeoutError:
            log.info("codex: steer %s unanswered: in only if the turn shows it", steer.steer_id)
            return None
        except AgentCrashed as exc:
            log.info("codex: steer %s refused (%s): the next turn", steer.steer_id, exc)
            return False
        return True

    def shown(self, message: dict[str, Any]) -> None:
        """A notification of the turn: the ``userMessage`` item of an accepted steer."""
        params = message.get("params")
        item = params.get("item") if isinstance(params, dict) else None
        if message.get("method") != "item/started" or not isinstance(item, dict):
            return
        if item.get("type") != "userMessage" or not isinstance(item.get("content"), list):
            return
        words = {str(c.get("text")) for c in item["content"] if isinstance(c, dict)}
        for waiting in (self._accepted, self._unsure):
            for steer in waiting:
                if steer.text in words:
                    waiting.remove(steer)
                    self._said.append(SteerTaken(steer.steer_id))
                    return
        if self._sending is not None and self._sending.text in words:
            self._seen.add(self._sending.text)

    async def finished(self) -> list[AgentEvent]:
        """The turn completed: a steer in flight gets its answer (bounded); one still waiting
        runs as the next turn."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), FINISH_WAIT_S)
        sending = self._sending
        await self.aclose()
        left = [*([sending] if sending else []), *self._unsure, *self._inbox.take()]
        self._unsure = []
        taken = [SteerTaken(s.steer_id) for s in self._accepted]  # accepted: in this turn
        self._accepted = []
        return [*self.said(), *taken, *(SteerDeferred(s.steer_id) for s in left)]

    async def aclose(self) -> None:
        self._sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._sender
