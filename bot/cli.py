"""The ``detach`` console script: run the bot, or capture and inspect tasks from a shell."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from bot import config, shell
from bot.errors import ConfigError, DetachError, UserInputError
from bot.models import ApprovalMode
from bot.shell import shell_settings, with_console
from bot.telegram.render import plain
from executors import registry

if TYPE_CHECKING:
    from bot.tasks.console import ConsoleTasks

NO_TOKEN = """Detach needs a Telegram bot token.

1. In Telegram, talk to @BotFather, send /newbot and copy the token it gives you.
2. Run `.venv/bin/detach init`: it asks for the token, waits for your /start to the bot and,
   once you confirm, writes the settings. Or by hand, in {env} (see .env.example):
     DETACH_BOT_TOKEN=123456789:AA...your-token
     DETACH_ALLOWED_USERS=<your numeric Telegram user id>   (ask @userinfobot)
3. Run `make run` again.
"""


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"detach: {exc}", file=sys.stderr)
        return 2
    except UserInputError as exc:
        from bot.telegram.texts import Texts  # aiogram's I18n: loaded only when there is a message

        print(f"detach: {plain(Texts().get('en', exc.key, **exc.params))}", file=sys.stderr)
        return 1
    except DetachError as exc:
        print(f"detach: {exc}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="detach",
        description=__doc__,
        epilog=config.describe().replace("; ", "\n")
        + f"\ndata directory: DETACH_DATA_DIR, else {config.data_home(os.environ)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(required=True)
    init = sub.add_parser(
        "init",
        help="pair the bot with you: checks the token, waits for your /start in Telegram, and "
        "after you confirm here writes the token and your id to the settings file",
    )
    init.add_argument("--token", help="the bot token (default: asked for)")
    init.set_defaults(func=_init)
    sub.add_parser("run", help="run the bot (long polling)").set_defaults(func=_run)
    worker = sub.add_parser(
        "worker",
        help="run agent turns from the shared PostgreSQL database "
        "(scale-out; the bot runs with DETACH_ROLE=front or all)",
    )
    worker.add_argument("name", nargs="?", default="1", help="this worker's name on this host")
    worker.set_defaults(func=_worker)
    mcp = sub.add_parser(
        "mcp",
        help="serve Detach to other agents over MCP (stdio; --http for streamable HTTP); the "
        "bot must be running",
    )
    mcp.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; clients send "
        "the bearer token in <config home>/mcp-token (made on first use for 127.0.0.1)",
    )
    mcp.add_argument(
        "--parent",
        type=int,
        metavar="TASK",
        help="serve the agent of task TASK (subtasks=yes): its sub-tasks only (the bot starts "
        "this itself)",
    )
    mcp.add_argument(
        "--task",
        type=int,
        metavar="TASK",
        help="serve the agent of task TASK its owner tools only, notify and ask_owner (the "
        "bot starts this itself)",
    )
    mcp.set_defaults(func=_mcp)
    add = sub.add_parser(
        "add",
        help="queue a goal, planned as /detach plans it in the chat; the running bot starts "
        "it, reports, and its number is printed",
    )
    add.add_argument(
        "goal",
        nargs="+",
        help="[key=value ...] the goal: the options of /detach (mode=, model=, ...)",
    )
    add.add_argument("--model")
    add.add_argument("--engine", choices=registry.names())
    add.add_argument("--chat", type=int, help="chat to report to (default: the first allowed user)")
    add.add_argument(
        "--cwd",
        help="working directory (default: the current one); must be inside DETACH_ALLOWED_WORKDIRS",
    )
    add.add_argument(
        "--worktree",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="run in its own git worktree and branch (default: in a repository when sandboxed, "
        "else DETACH_WORKTREES); such a task goes through the inbox, so the bot makes the worktree",
    )
    add.add_argument(
        "--mode",
        choices=[m.value for m in ApprovalMode],
        help="approval mode (default: DETACH_DETACH_MODE, sandbox where the bot's sandbox works); "
        "a sandboxed task goes through the inbox, so the bot decides",
    )
    add.add_argument(
        "--check",
        help='a command run after the agent, e.g. "pytest -q" (default: check in the '
        "repository's .detach.toml; --check no for none)",
    )
    add.set_defaults(func=shell.add)
    adopt = sub.add_parser(
        "adopt",
        help="make a Claude Code session (or Codex thread) started at a terminal a task: the "
        "running bot sends its card, and a reply continues it",
    )
    adopt.add_argument("id", help="the session id (claude: its .jsonl name; codex: the thread id)")
    adopt.add_argument("--cwd", help="the session's directory (default: wherever it was)")
    adopt.add_argument(
        "--chat", type=int, help="chat to report to (default: the first allowed user)"
    )
    adopt.set_defaults(func=shell.adopt)
    sub.add_parser("list", help="list tasks").set_defaults(func=shell.list_tasks)
    show = sub.add_parser("show", help="show a task, its turns and transcript tail")
    show.add_argument("id", type=int)
    show.set_defaults(func=shell.show)
    export_ = sub.add_parser(
        "export",
        help="print a task as a task file (the detach skill's "
        "Markdown); drop such a file into DATA_DIR/inbox/ to start a task",
    )
    export_.add_argument("id", type=int)
    export_.add_argument(
        "--jsonl",
        action="store_true",
        help="print the task's transcript instead, one event a line (docs/transcript-jsonl.md)",
    )
    export_.add_argument(
        "--after",
        type=int,
        default=0,
        metavar="LINE",
        help="with --jsonl: only the events after this line (the last one a reader has)",
    )
    export_.set_defaults(func=shell.export)
    board = sub.add_parser(
        "board", help="print a one-time sign-in link to the running bot's board (web view)"
    )
    board.add_argument("--user", type=int, help="whose board (default: the first allowed user)")
    board.add_argument("--open", action="store_true", help="open it in the browser too")
    board.set_defaults(func=_board)
    archive = sub.add_parser("archive", help="archive a finished task, or all of them")
    archive.add_argument("id", nargs="?", type=int)
    archive.add_argument("--all", action="store_true")
    archive.set_defaults(func=shell.archive)
    return parser


def _logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("aiogram.event").setLevel(logging.WARNING)
    # a line per job (each turn, each fired schedule) and per clean-up: the pool says its own
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def _init(args: argparse.Namespace) -> int:
    from bot import pairing
    from bot.settings import TELEGRAM_API_URL

    given = os.environ.get(config.ENV_FILE_VAR)
    target = Path(given).expanduser() if given else config.config_home(os.environ) / "env"
    api = os.environ.get("DETACH_TELEGRAM_API_URL") or TELEGRAM_API_URL
    return pairing.pair(target, api, args.token)


def _run(_args: argparse.Namespace) -> int:
    settings = shell_settings()
    if settings.bot_token is None:
        home = config.config_home(os.environ) / "env"
        print(NO_TOKEN.format(env=f"{home} (or ./.env where you run it)"), file=sys.stderr)
        return 2
    if not settings.allowed_users:
        print(
            "detach: DETACH_ALLOWED_USERS is empty, so nobody could use the bot. Put your "
            "numeric Telegram user id there (ask @userinfobot).",
            file=sys.stderr,
        )
        return 2
    _logging()
    logging.getLogger("detach").info("%s; data in %s", config.describe(), settings.data_dir)
    with _importing():
        from bot.app import serve  # the bot's imports are only needed to serve

    asyncio.run(serve(settings))
    return 0


@contextlib.contextmanager
def _importing() -> Iterator[None]:
    """The imports of a serving process, without the cyclic collector (``bot.launch`` switched
    it off before the first of them): they make ~140,000 objects that live as long as the
    process, and collecting among them while importing took 0.1 s of the start here.
    Afterwards those objects are frozen (``gc.freeze``): later collections, on every turn, no
    longer walk them, and the collector is on again."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def _worker(args: argparse.Namespace) -> int:
    settings = shell_settings()
    if settings.jobs_database_url is None:
        print(
            "detach: a worker needs the bot's PostgreSQL database: set DETACH_DATABASE_URL="
            "postgresql+asyncpg://… (the same as the bot's)",
            file=sys.stderr,
        )
        return 2
    _logging()
    with _importing():
        from bot.worker import serve_worker  # the bot's imports are only needed to serve

    asyncio.run(serve_worker(settings, args.name))
    return 0


def _mcp(args: argparse.Namespace) -> int:
    """`detach mcp`: the MCP server, on this machine's settings and the bot's database."""
    from bot.mcp.command import plan, serve
    from bot.money.presets import PresetCatalog

    settings = shell_settings()
    place, endpoint = plan(settings, args.http)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    catalog = PresetCatalog.load(settings.config, registry.builtin_presets())

    async def work(console: ConsoleTasks) -> None:
        # the daily cap a follow-up keeps, as the bot counts it
        money = console.money(settings, catalog)
        clients = console.clients(place.owner, money, settings)
        await serve(clients, place, endpoint, args.parent, args.task)

    return asyncio.run(with_console(settings, work, create=False))


def _board(args: argparse.Namespace) -> int:
    from bot.board.command import run

    return run(shell_settings(), args.user, args.open)
