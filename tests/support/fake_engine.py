"""An engine that replays a recorded event stream: the fast test tier for handlers, notifier and
outbox, plugged in through ``build(executors=...)`` — the same seam the registry's engines use."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass

from bot.events import AgentEvent, ApprovalRequest, SteerTaken
from bot.models import Phrase, TurnSpec
from bot.ports import NO_STEERING, NOW, Approver, Ready, SteerInbox


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
        self.steered: list[str] = []  # the words of the steers it took in

    async def probe(self) -> Phrase:
        return Phrase("probe.version", {"engine": self.engine, "version": self._version})

    def sandbox_problem(self) -> Phrase | str | None:
        return self._sandbox_problem

    async def run(
        self,
        spec: TurnSpec,
        approver: Approver,
        steering: SteerInbox | None = None,
        ready: Ready = NOW,
    ) -> AsyncGenerator[AgentEvent, None]:
        await ready()  # as a real agent: the prompt once the baseline is read
        self.specs.append(spec)
        script = self._script(spec) if callable(self._script) else self._script
        for item in script:
            if isinstance(item, ApprovalRequest):
                self.decisions.append((await approver.decide(item)).allow)
            elif isinstance(item, Pause | Until):
                async for taken in self._idle(item, steering or NO_STEERING):
                    yield taken
            else:
                yield item

    async def _idle(
        self, item: Pause | Until, steering: SteerInbox
    ) -> AsyncGenerator[SteerTaken, None]:
        """Silent for the pause (or until its gate), taking in each steer that arrives
        meanwhile, as an agent at work reads it at its next step (``steered``: their words)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + item.seconds
        gate = item.gate if isinstance(item, Until) else None
        while (left := deadline - loop.time()) > 0 and not (gate is not None and gate.is_set()):
            waits = [asyncio.ensure_future(steering.arrived())]
            if gate is not None:
                waits.append(asyncio.ensure_future(gate.wait()))
            _, pending = await asyncio.wait(waits, timeout=left, return_when="FIRST_COMPLETED")
            for waiting in pending:
                waiting.cancel()
            for steer in steering.take():
                self.steered.append(steer.text)
                yield SteerTaken(steer.steer_id)
