"""What a turn is told and what it comes to: the preambles an agent gets, the prompt of a
check round, the outcome of a verdict or of an exception, transcript entries, and the exit
callback that owns an agent's event stream (``bot.turns.runner`` drives the turn)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncGenerator
from dataclasses import asdict
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.errors import AgentCrashed, AgentNotInstalled
from bot.events import AgentEvent, TurnFinished
from bot.models import ApprovalMode, Phrase, Task, TaskKind, TaskStatus, Turn, TurnError
from bot.money.pricing import Meter
from bot.store import TurnOutcome

log = logging.getLogger(__name__)

DETACH_PREAMBLE = (
    "You are running as a detached background job started from a phone. Nobody will answer "
    "questions while you work: do not ask for confirmation or clarification. Work with what you "
    "have, make reasonable assumptions, state them in your final answer, and finish with a short "
    "summary of what you did and what is left."
)
SANDBOX_PREAMBLE = (
    "Your shell commands run in an operating-system sandbox: you may write only inside the "
    "working directory and reach only allowed network hosts. Stay inside it; anything outside "
    "it waits for the owner's approval from their phone, which may be denied. Leave your "
    "changes uncommitted in the working directory: the owner reviews and merges them."
)
CHECK_PROMPT = (
    "The check `{command}` failed after your last turn. The end of its output:\n\n"
    "```\n{output}\n```\n\nFix the cause so that the check passes, then summarise what you "
    "changed."
)
CHECK_PROMPT_TAIL = 6000


def reaper(events: AsyncGenerator[AgentEvent, None]) -> Any:
    """The exit callback owning an agent's event stream: after a normal end (the agent gave its
    verdict) the rest of the stream is read, in which the executor waits, bounded, for the
    agent to exit; after an error or a cancel the stream is closed, which stops the agent."""

    async def reap(exc_type: type[BaseException] | None, *_: object) -> bool:
        try:
            if exc_type is None:
                async for _event in events:
                    pass
        finally:
            await events.aclose()
        return False

    return reap


def failure(task: Task, turn: Turn, exc: Exception) -> TurnOutcome:
    """The outcome of a turn that raised: the agent crashed, is missing, or (the one catch-all
    of the pool: a failing turn never kills it) something unexpected."""
    if isinstance(exc, AgentCrashed):
        said = exc.said
        error = (
            TurnError("turn_error.agent", {"reason": exc.reason})
            if said is None
            else TurnError(said.key, _stored(said))
        )
        return TurnOutcome(TaskStatus.FAILED, stderr_tail=exc.stderr_tail, error=error)
    if isinstance(exc, AgentNotInstalled):
        return TurnOutcome(
            TaskStatus.FAILED,
            error=TurnError(
                "turn_error.not_installed", {"engine": exc.engine, "binary": exc.binary or "–"}
            ),
        )
    log.error("task %s turn %s: unexpected error", task.id, turn.id, exc_info=exc)
    return TurnOutcome(
        TaskStatus.FAILED, error=TurnError("turn_error.internal", {"error": type(exc).__name__})
    )


def _stored(said: Phrase) -> dict[str, str | int | float]:
    """A phrase's params as a stored error keeps them (plain values)."""
    return {k: v for k, v in said.params.items() if isinstance(v, str | int | float)}


NOTIFY_PREAMBLE = (
    "You have a `notify` tool (Detach's; mcp__detach__notify where tools have servers): "
    "one short note to your owner's Telegram now, silent unless urgent=true. Use it "
    "rarely, for what the owner should know before you finish; your final answer reaches "
    "them anyway."
)
TREE_PREAMBLE = (
    "You are a sub-task another agent started. Through the `detach` MCP server you may "
    "`report` to it (it reads reports with `inbox`), `message` a sibling (another sub-task of "
    "the same parent, by task_id) and read what came to you with `inbox`."
)
ASK_PREAMBLE = (
    "You have an `ask_owner` tool (Detach's too): one question with 1 to 4 short "
    "answers your owner taps in Telegram; it waits for the tap, or returns no answer after "
    "a while (then use your judgement). Ask only when a wrong guess would waste the work."
)
TOOL_PREAMBLES = {"notify": NOTIFY_PREAMBLE, "ask_owner": ASK_PREAMBLE}


def preamble(task: Task, owner: str | None = None, tools: tuple[str, ...] = ()) -> str | None:
    """What the agent is told beside its prompt: the owner's preamble first, then Detach's,
    which names the owner ``tools`` it has (``notify``, ``ask_owner``)."""
    parts = [owner] if owner else []
    parts += [DETACH_PREAMBLE] if task.kind is TaskKind.DETACH else []
    if task.approval_mode is ApprovalMode.SANDBOX:
        parts.append(SANDBOX_PREAMBLE)
    parts += [TOOL_PREAMBLES[name] for name in tools if name in TOOL_PREAMBLES]
    if task.parent_id is not None:  # its `detach mcp --parent` server has the tree tools
        parts.append(TREE_PREAMBLE)
    return "\n\n".join(parts) or None


def transcript_entry(event: AgentEvent) -> tuple[str, dict[str, Any]]:
    body = asdict(event)
    body.pop("extra", None)
    return type(event).__name__, body


def outcome_of(final: TurnFinished, meter: Meter) -> TurnOutcome:
    """The outcome of the agent's verdict, priced: Claude reports its cost; other engines'
    tokens are priced by ``meter`` (an unpriced model at the price the caps count it at)."""
    error = None
    if final.is_error:  # the agent's own words
        error = TurnError(
            "turn_error.text",
            {
                "text": final.result_text
                or "; ".join(final.errors)
                or final.subtype
                or "agent error"
            },
        )
    status = TaskStatus.FAILED if final.is_error else TaskStatus.DONE
    if final.subtype == "error_max_budget_usd":
        status = TaskStatus.BUDGET_EXCEEDED
    charge = meter.charge(final.usage, final.cost_usd)
    return TurnOutcome(
        status=status,
        result_text=final.result_text,
        error=error,
        cost_usd=charge.cost_usd,
        input_tokens=final.usage.input_tokens,
        output_tokens=final.usage.output_tokens,
        model=charge.model,
        unpriced=charge.unpriced,
    )


def charged(outcome: TurnOutcome, meter: Meter) -> TurnOutcome:
    """An outcome without the agent's verdict (a budget stop, a failure, a cancel) with what
    the tokens used up to then cost: a turn stopped half-way is not free."""
    charge = meter.charge()
    return dataclasses.replace(
        outcome,
        cost_usd=charge.cost_usd,
        input_tokens=meter.usage.input_tokens,
        output_tokens=meter.usage.output_tokens,
        model=charge.model,
        unpriced=charge.unpriced,
    )


def local_time(moment: datetime, zone_name: str, now: datetime | None = None) -> str:
    """``moment`` as a person in ``zone_name`` reads it: "16:59 (Europe/Berlin)", with the date
    when it is not today there ("2026-12-02 09:00 (Europe/Berlin)")."""
    try:
        zone = ZoneInfo(zone_name)
    except (ZoneInfoNotFoundError, ValueError):
        zone, zone_name = ZoneInfo("UTC"), "UTC"
    there = moment.astimezone(zone)
    today = (now or datetime.now(zone)).astimezone(zone).date()
    shown = there.strftime("%H:%M") if there.date() == today else there.strftime("%Y-%m-%d %H:%M")
    return f"{shown} ({zone_name})"
