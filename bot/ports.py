"""The Protocols the core depends on; adapters live in executors/ and bot/notifier.py."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from bot.models import AgentEvent, ApprovalDecision, ApprovalRequest, TurnSpec


class Approver(Protocol):
    """Answers an agent's permission requests for one turn; every path but Allow is a deny."""

    async def decide(self, request: ApprovalRequest) -> ApprovalDecision: ...


class Executor(Protocol):
    """One agent engine: runs one turn and yields engine-neutral events.

    The stream ends with exactly one ``TurnFinished``, or raises ``AgentCrashed`` when the agent
    ended without a verdict. Closing the iterator early (cancel, timeout) stops the agent and
    every process it started before the close returns.
    """

    engine: str

    def run(self, spec: TurnSpec, approver: Approver) -> AsyncGenerator[AgentEvent, None]: ...

    async def version(self) -> str: ...
