"""What the preflight's model is told: the goal, the directory's name and a short listing (names
only, never a file's contents), the presets on offer with their prices, the remaining budget,
and the JSON it must answer with."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from bot.models import Preset

LISTING_MAX = 40  # entries of the directory's listing
NAME_MAX = 80  # characters of one entry's name
GOAL_MAX = 4000  # characters of the goal the preflight reads

INSTRUCTIONS = """\
You are the preflight of an unattended coding agent. Before the agent starts on the goal
below, with nobody watching, decide in one step whether it can start:
- "go": the goal is clear and sane enough to do without questions;
- "ask": it is too vague to do well: ask ONE short question, with up to 4 short suggested
  answers;
- "refuse": it is destructive or impossible as stated: say why in one sentence.
Also suggest the cheapest preset below that can do it well, and estimate its cost in USD and
its duration in minutes. Answer with ONLY one JSON object, no prose, of this shape:
{"verdict": "go" | "ask" | "refuse", "question": "...", "answers": ["..."], "reason": "...",
 "engine": "...", "preset": "...", "estimate_usd": 0.0, "estimate_minutes": 0}"""


def listing(cwd: Path) -> tuple[str, ...]:
    """Up to ``LISTING_MAX`` names in ``cwd`` (directories end in ``/``), sorted, hidden ones
    left out; nothing if it cannot be read. Blocking: call it off the event loop."""
    try:
        with os.scandir(cwd) as entries:
            names = sorted(
                (e.name[:NAME_MAX] + ("/" if e.is_dir(follow_symlinks=False) else ""))
                for e in entries
                if not e.name.startswith(".")
            )
    except OSError:
        return ()
    more = len(names) - LISTING_MAX
    return tuple(names[:LISTING_MAX]) + ((f"… and {more} more",) if more > 0 else ())


def build_prompt(
    goal: str,
    cwd: Path,
    names: Sequence[str],
    offered: Sequence[Preset],
    remaining_usd: float | None,
) -> str:
    """The preflight's one prompt. ``names``: ``listing(cwd)``; ``remaining_usd``: what the
    task may still spend (None: no cap)."""
    presets = "\n".join(
        f"- engine {p.engine}, preset {p.name}: USD {p.price_input:g} in / "
        f"{p.price_output:g} out per million tokens"
        if p.priced
        else f"- engine {p.engine}, preset {p.name}: price unknown"
        for p in offered
    )
    budget = "no cap" if remaining_usd is None else f"USD {remaining_usd:.2f}"
    shown = "\n".join(f"  {n}" for n in names) or "  (empty or unreadable)"
    return (
        f"{INSTRUCTIONS}\n\n"
        f"Working directory: {cwd.name or str(cwd)}\n{shown}\n\n"
        f"Presets on offer:\n{presets or '- (none)'}\n\n"
        f"Remaining budget: {budget}\n\n"
        f"Goal:\n<goal>\n{goal[:GOAL_MAX]}\n</goal>"
    )
