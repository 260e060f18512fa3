"""The first prompt of a new session that carries a task on: the goal, a summary of what was
said and done so far (from the app's transcript), the directory's uncommitted changes and the
request that waits. For a task carried over to another engine (``bot.tasks.handover``) and for
a turn whose session could not be resumed (the worker that held it is gone)."""

from __future__ import annotations

from bot.models import Task, Turn
from bot.store import Store
from bot.telegram.render import shorten
from bot.turns.gitinfo import diff_text
from bot.turns.transcript import human_line
from executors.gitguard import GitGuard

SUMMARY_CHARS = 6000  # the newest part of the transcript that goes along
DIFF_CHARS = 12000
TRANSCRIPT_EVENTS = 400
PROMPT_CHARS = 400  # of each earlier request, in the summary

HANDOVER = """You are taking over a coding task from another agent ({engine}), which stopped \
because its usage limit was reached. You work in the same directory, where its changes so far \
are (uncommitted). Carry on from where it stopped: do not start over, and keep its work unless \
it is wrong.
"""
LOST = """You are continuing a coding task whose conversation could not be resumed (the \
machine or process that held it is gone). You work in the same directory, where the changes so \
far are (uncommitted). Carry on from where it stopped: do not start over, keep the work unless \
it is wrong, and check the state before repeating anything with side effects.
"""
BODY = """
## The goal
{goal}

## What happened so far (from its transcript: 💬 what it said, ▸ a tool it called, ↳ the result)
{summary}

## The directory's changes so far (git diff HEAD)
{diff}

## Now
{now}"""
CARRY_ON = "Carry on with the goal and finish it; end with a short summary of what you did."


async def handover_prompt(store: Store, git: GitGuard, task: Task, waiting: Turn) -> str:
    """The first prompt of a session on another engine, for a task that waited for its
    engine's usage limit (``new_session_prompt`` with the handover's header)."""
    return HANDOVER.format(engine=task.engine.capitalize()) + await _body(store, git, task, waiting)


async def lost_session_prompt(store: Store, git: GitGuard, task: Task, waiting: Turn) -> str:
    """The first prompt of a new session for a task whose session could not be resumed."""
    return LOST + await _body(store, git, task, waiting)


async def _body(store: Store, git: GitGuard, task: Task, waiting: Turn) -> str:
    """The goal (the task's first request), what the agent said and did in each turn so far
    (the newest ``SUMMARY_CHARS``), the directory's changes, and what the waiting turn asks
    (for the first turn: carry on)."""
    first = await store.tasks.first_turn(task.id)
    goal = first.prompt if first is not None else waiting.prompt
    events = await store.transcript.tail(task.id, TRANSCRIPT_EVENTS)
    lines: list[str] = []
    for turn in await store.tasks.turns_of(task.id):
        if turn.seq > waiting.seq:  # queued behind it: the new session gets those later
            break
        said = [
            line
            for event in events
            if event.turn_id == turn.id and (line := human_line(event.kind, event.body))
        ]
        if turn.seq > 1 and (said or turn.id != waiting.id):
            asked = shorten(turn.prompt, PROMPT_CHARS, one_line=True)
            lines.append(f"### Then it was asked: {asked}")
        lines += said
    summary = "\n".join(lines)
    if len(summary) > SUMMARY_CHARS:
        summary = "… (earlier events left out)\n" + summary[-SUMMARY_CHARS:]
    diff = await diff_text(git, task.cwd, DIFF_CHARS)
    return BODY.format(
        goal=goal,
        summary=summary or "(nothing recorded: it stopped before it did anything)",
        diff=(f"```diff\n{diff}\n```" if diff else "(none)")
        if diff is not None
        else "(not a git repository: look at the directory itself)",
        now=waiting.prompt if waiting.seq > 1 else CARRY_ON,
    )
