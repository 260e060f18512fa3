"""The completion card's text: its status line and the lines under it (the task's title, its
check, its sub-tasks, a usage-limit wait, what changed). Pure rendering in the owner's
locale; the notifier sends it."""

from __future__ import annotations

import html
from collections.abc import Sequence

from bot.models import CheckResult, Task, TaskStatus, Turn
from bot.telegram.render import STATUS_ICONS, duration, money, shorten
from bot.telegram.terminal import terminal_line
from bot.telegram.texts import Texts

MAX_CHILDREN = 10  # sub-tasks named on a card; the rest are counted
MAX_DENIALS = 10  # denied tool calls listed on a card; the rest are counted


def card_header(
    texts: Texts,
    task: Task,
    turn: Turn,
    check: CheckResult | None,
    children: Sequence[Task],
    changes: str,
    denials: Sequence[str] = (),
    host: str | None = None,
) -> str:
    """The card's text above the answer: what happened (a turn done with tool calls denied
    says so on its first line, and lists them), what it took, what changed; ``host``: the
    host that ran it, named when several are known."""
    loc = task.locale
    lines = [
        status_line(texts, task, turn, len(denials)),
        "<i>" + html.escape(shorten(task.title, 100, one_line=True), quote=False) + "</i>",
    ]
    if host:
        lines.append(texts.get(loc, "task.host", host=host))
    if check is not None:
        lines.append(check_line(texts, loc, check))
    if children:
        lines.append(children_line(texts, loc, children))
    if turn.waited_s is not None and turn.waited_s >= 1:
        lines.append(
            texts.get(
                loc,
                "task.waited_limit",
                duration=duration(turn.waited_s),
                engine=task.engine.capitalize(),
            )
        )
    if changes:
        lines.append(texts.get(loc, "task.changes", stat=changes))
    if denials:
        lines.append(denials_block(texts, loc, denials))
    if at_terminal := terminal_line(texts, task):  # how to go on at a terminal (hand-off)
        lines.append(at_terminal)
    return "\n".join(lines)


def denials_block(texts: Texts, loc: str, denials: Sequence[str]) -> str:
    """The tool calls the turn was denied, one line each (the agent's words: escaped, cut)."""
    items = [f"• {shorten(d, 200, one_line=True)}" for d in denials[:MAX_DENIALS]]
    if len(denials) > MAX_DENIALS:
        items.append(f"• +{len(denials) - MAX_DENIALS}")
    return texts.get(loc, "task.denials", items="\n".join(items))


def children_line(texts: Texts, loc: str, children: Sequence[Task]) -> str:
    """The sub-tasks its agent started: ``🧩 Sub-tasks: ✅ #5 fix-a · 🏃 #6 fix-b``."""
    shown = " · ".join(
        f"{STATUS_ICONS[c.status]} {html.escape(c.label)}" for c in children[:MAX_CHILDREN]
    )
    more = f" · +{len(children) - MAX_CHILDREN}" if len(children) > MAX_CHILDREN else ""
    return texts.raw(loc, "task.subtasks", items=shown + more)


def check_line(texts: Texts, loc: str, check: CheckResult) -> str:
    """``✅ check passed (pytest -q, 12 s, round 2)`` or the failure with its output's tail."""
    params = {
        "command": html.escape(shorten(check.command, 80, one_line=True)),
        "duration": duration(check.duration_s),
        "round": check.round,
    }
    if not check.approved:
        return texts.raw(loc, "check.not_approved", command=params["command"])
    if check.passed:
        return texts.raw(loc, "check.passed", **params)
    line = texts.raw(
        loc,
        "check.timed_out" if check.timed_out else "check.failed",
        code=check.exit_code if check.exit_code is not None else "–",
        **params,
    )
    return f"{line}\n<pre>{html.escape(check.tail(800))}</pre>"


def cost_words(texts: Texts, loc: str, turn: Turn) -> str:
    """``$0.0123``; ``unpriced (counted $0.0450)`` for a model without a known price."""
    cost = money(turn.cost_usd)
    if turn.unpriced:
        return texts.get(loc, "task.cost_unpriced", cost=cost or "0")
    return texts.get(loc, "task.cost", cost=cost) if cost else texts.get(loc, "task.cost_unknown")


def ran_words(texts: Texts, loc: str, turn: Turn) -> str:
    """What the turn cost, after the model that ran it as its engine named it:
    ``claude-sonnet-4-5 · $0.0123``."""
    cost = cost_words(texts, loc, turn)
    if not turn.model:
        return cost
    return texts.raw(loc, "task.model_cost", model=html.escape(turn.model), cost=cost)


def status_line(texts: Texts, task: Task, turn: Turn, denied: int = 0) -> str:
    """How the turn ended, how long it took and what it cost (a failure: why). A turn done
    with ``denied`` tool calls is not a plain "done": ``⚠️ #3 · done, 1 tool call denied``."""
    loc, label = task.locale, task.label
    took = duration(turn.duration_s)
    cost = money(turn.cost_usd)
    cost_text = ran_words(texts, loc, turn)
    status = turn.status
    if status is TaskStatus.DONE and turn.started_at is None and not denied:
        # run elsewhere (an adopted session): what its file told, the unknown said in words
        model = html.escape(turn.model) if turn.model else texts.get(loc, "task.model_unknown")
        ran = texts.raw(loc, "task.model_cost", model=model, cost=cost_words(texts, loc, turn))
        return texts.raw(loc, "task.done_elsewhere", label=html.escape(label), ran=ran)
    if status is TaskStatus.DONE:
        total = money(task.total_cost_usd) if task.total_cost_usd else None
        total_text = (
            texts.get(loc, "task.task_total", total=total) if total and total != cost else ""
        )
        if denied:
            return texts.get(
                loc,
                "task.done_denied",
                label=label,
                denied=texts.plural(loc, "task.denied_count", denied),
                duration=took,
                cost=cost_text,
                total=total_text,
            )
        return texts.get(
            loc, "task.done", label=label, duration=took, cost=cost_text, total=total_text
        )
    if status is TaskStatus.CHECK_FAILED:  # every round's cost: the whole task's
        total = money(task.total_cost_usd) if task.total_cost_usd else None
        return texts.get(
            loc,
            "task.check_failed",
            label=label,
            rounds=turn.check_round,
            duration=took,
            cost=texts.get(loc, "task.cost", cost=total) if total else cost_text,
        )
    if status is TaskStatus.BUDGET_EXCEEDED:
        return texts.get(loc, "task.budget_exceeded", label=label, duration=took, cost=cost_text)
    if status is TaskStatus.CANCELLED:
        return texts.get(loc, "task.cancelled", label=label)
    if status is TaskStatus.TIMED_OUT:
        return texts.get(loc, "task.timed_out", label=label, duration=took)
    text = texts.get(
        loc,
        "task.failed",
        label=label,
        duration=took,
        reason=shorten(texts.error(loc, turn.error), 500, one_line=True),
    )
    if turn.stderr_tail:
        text += "\n" + texts.get(loc, "task.stderr", tail=turn.stderr_tail[-1500:])
    return text
