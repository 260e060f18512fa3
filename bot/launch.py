"""How ``detach`` and ``python -m bot`` start: a serving process (``run``, ``worker``) runs with
Python's ``-OO``, anything else as it was started.

``-OO`` leaves out docstrings and asserts: the code objects of everything the bot imports
(aiogram's ~700 types, SQLAlchemy Core, pydantic) hold 5 MB less (the idle bot: 90 -> 85 MB
here). Nothing the bot or a worker runs reads a docstring (``detach mcp``, whose tools'
descriptions could come from them, is not a serving process here and keeps them), and their
asserts only narrow types. The switch is one ``exec`` of the same interpreter before
anything heavy is imported (a few tens of ms); ``-P`` keeps the current directory off
``sys.path``, so a ``bot`` package where ``detach run`` is typed is never the one run. The
optimized bytecode is compiled at install (``make venv``); without it the first start compiles
it (about 2 s).

A serving process also imports with the cyclic collector off from its first import on (its
~140,000 objects live as long as the process: collecting among them while
``bot.cli``'s own imports run, SQLAlchemy and pydantic-settings, cost ~40 ms of CPU of the
start here); ``bot.cli`` freezes them and switches it back on once the app is imported."""

from __future__ import annotations

import gc
import os
import sys

SERVING = frozenset({"run", "worker"})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if _optimizable(args):
        os.execv(sys.executable, [sys.executable, "-OO", "-P", "-m", "bot", *args])
    collect_after_imports(args)
    from bot.cli import main as cli_main  # noqa: PLC0415 — after the decision: it imports much

    return cli_main(args)


def collect_after_imports(args: list[str]) -> None:
    """A serving command: no cyclic collection until its imports are done (``bot.cli``
    ``_importing`` freezes what they made and switches it back on). Anything else as it was."""
    if args and args[0] in SERVING:
        gc.disable()


def _optimizable(args: list[str]) -> bool:
    """A serving command not yet optimized (help keeps its docstrings)."""
    return (
        bool(args)
        and args[0] in SERVING
        and sys.flags.optimize < 2
        and not {"-h", "--help"} & set(args)
    )
