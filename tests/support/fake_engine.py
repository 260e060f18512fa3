"""An engine that replays a recorded event stream: the fast test tier for handlers, notifier and
outbox, plugged in through ``build(executors=...)`` — the same seam the registry's engines use."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass

from bot.events import AgentEvent, ApprovalRequest
from bot.models import TurnSpec
from bot.ports import Approver, SteerInbox


@dataclass(frozen=True, slots=True)
class Pause:
    """A silent agent: nothing for ``seconds`` (a tool at work, a model thinking)."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Until:
    """A silent agent until the test sets ``gate``, ``seconds`` at most."""

    gate: asyncio.Event
    seconds: float = 30.0


Script = Sequence[AgentEvent | ApprovalRequest | Pause | Until]


class FakeEngine:
    """Replays ``script`` (or ``script(spec)``) for every turn; an ApprovalRequest in it is put
    to the approval desk like a real engine would, and the decision recorded."""

    def __init__(
        self,
        script: Script | Callable[[TurnSpec], Script],
        engine: str = "claude",
        version: str = "fake",
        sandbox_problem: str | None = None,
    ) -> None:
        """``sandbox_problem``: what ``mode=sandbox`` would say on a machine without one."""
        self.engine = engine
        self._sandbox_problem = sandbox_problem
        self._script = script
        self._version = version
        self.specs: list[TurnSpec] = []
        self.decisions: list[bool] = []

    async def probe(self) -> str:
        return f"{self.engine} {self._version}"

    def sandbox_problem(self) -> str | None:
        return self._sandbox_problem

    async def run(
        self, spec: TurnSpec, approver: Approver, steering: SteerInbox | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        self.specs.append(spec)
        script = self._script(spec) if callable(self._script) else self._script
        for item in script:
            if isinstance(item, ApprovalRequest):
                self.decisions.append((await approver.decide(item)).allow)
            elif isinstance(item, Pause):
                await asyncio.sleep(item.seconds)
            elif isinstance(item, Until):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(item.gate.wait(), item.seconds)
            else:
                yield item
