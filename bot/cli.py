"""The ``detach`` console script: run the bot, or capture and inspect tasks from a shell."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import gettext
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bot import config, shell
from bot.errors import AlreadyRunning, ConfigError, DetachError, UserInputError
from bot.models import ApprovalMode, Phrase
from bot.shell import shell_settings, terminal, with_console
from bot.telegram.terminal_texts import TerminalTexts
from bot.telegram.texts import LOCALES_DIR
from executors import registry

if TYPE_CHECKING:
    from bot.tasks.console import ConsoleTasks


def _argparse_speaks() -> None:
    """argparse's own words (``usage:``, its errors) in the terminal's language: argparse asks
    gettext's default domain, so this process's domain is ``argparse`` from ``locales/``."""
    gettext.bindtextdomain("argparse", LOCALES_DIR)
    gettext.textdomain("argparse")


def main(argv: list[str] | None = None) -> int:
    try:
        _argparse_speaks()
        args = _parser(terminal()).parse_args(argv)
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"detach: {_said(exc.words)}", file=sys.stderr)
        return 2
    except UserInputError as exc:  # the chat's words, in the terminal's language
        print(f"detach: {_said(Phrase(exc.key, exc.params))}", file=sys.stderr)
        return 1
    except AlreadyRunning as exc:  # in the terminal's language
        print(f"detach: {_said(exc.words or str(exc))}", file=sys.stderr)
        return 1
    except DetachError as exc:
        print(f"detach: {exc}", file=sys.stderr)
        return 1


def _said(words: Phrase | str) -> str:
    """``words`` in the terminal's language; where the catalogs cannot be read (not compiled:
    that is the complaint) a text as it is."""
    try:
        return terminal().say(words)
    except ConfigError:
        return words if isinstance(words, str) else words.key


def _parser(say: TerminalTexts) -> argparse.ArgumentParser:
    """The commands and their help, in the terminal's language (argparse's own words, usage
    and errors, come from gettext's ``argparse`` domain in the same ``locales/``)."""
    settings_place = say.say(config.settings_words(os.environ, Path.cwd()))
    data_home = str(config.data_home(os.environ))
    parser = argparse.ArgumentParser(
        prog="detach",
        description=say("shell.help.detach"),
        epilog=settings_place.replace("; ", "\n") + "\n" + say("shell.help.data", home=data_home),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(required=True)
    init = sub.add_parser("init", help=say("shell.help.init"))
    init.add_argument("--token", help=say("shell.help.init_token"))
    init.set_defaults(func=_init)
    sub.add_parser("run", help=say("shell.help.run")).set_defaults(func=_run)
    worker = sub.add_parser("worker", help=say("shell.help.worker"))
    worker.add_argument("name", nargs="?", default="1", help=say("shell.help.worker_name"))
    worker.set_defaults(func=_worker)
    mcp = sub.add_parser("mcp", help=say("shell.help.mcp"))
    mcp.add_argument("--http", metavar="HOST:PORT", help=say("shell.help.mcp_http"))
    mcp.add_argument("--parent", type=int, metavar="TASK", help=say("shell.help.mcp_parent"))
    mcp.add_argument("--task", type=int, metavar="TASK", help=say("shell.help.mcp_task"))
    mcp.set_defaults(func=_mcp)
    _add_parser(sub, say)
    adopt = sub.add_parser("adopt", help=say("shell.help.adopt"))
    adopt.add_argument("id", help=say("shell.help.adopt_id"))
    adopt.add_argument("--cwd", help=say("shell.help.adopt_cwd"))
    adopt.add_argument("--chat", type=int, help=say("shell.help.chat"))
    adopt.set_defaults(func=shell.adopt)
    sub.add_parser("list", help=say("shell.help.list")).set_defaults(func=shell.list_tasks)
    show = sub.add_parser("show", help=say("shell.help.show"))
    show.add_argument("id", type=int)
    show.set_defaults(func=shell.show)
    export_ = sub.add_parser("export", help=say("shell.help.export"))
    export_.add_argument("id", type=int)
    export_.add_argument("--jsonl", action="store_true", help=say("shell.help.export_jsonl"))
    after_help = say("shell.help.export_after")
    export_.add_argument("--after", type=int, default=0, metavar="LINE", help=after_help)
    export_.set_defaults(func=shell.export)
    board = sub.add_parser("board", help=say("shell.help.board"))
    board.add_argument("--user", type=int, help=say("shell.help.board_user"))
    board.add_argument("--open", action="store_true", help=say("shell.help.board_open"))
    board.set_defaults(func=_board)
    archive = sub.add_parser("archive", help=say("shell.help.archive"))
    archive.add_argument("id", nargs="?", type=int)
    archive.add_argument("--all", action="store_true")
    archive.set_defaults(func=shell.archive)
    return parser


def _add_parser(sub: Any, say: TerminalTexts) -> None:
    """``detach add``: a goal and the options of /detach, some of them as flags."""
    add = sub.add_parser("add", help=say("shell.help.add"))
    goal = say("shell.help.goal")
    add.add_argument("goal", nargs="+", metavar=goal, help=say("shell.help.add_goal"))
    add.add_argument("--model")
    add.add_argument("--engine", choices=registry.names())
    add.add_argument("--chat", type=int, help=say("shell.help.chat"))
    add.add_argument("--cwd", help=say("shell.help.add_cwd"))
    worktree = say("shell.help.add_worktree")
    add.add_argument("--worktree", action=argparse.BooleanOptionalAction, help=worktree)
    modes = [m.value for m in ApprovalMode]
    add.add_argument("--mode", choices=modes, help=say("shell.help.add_mode"))
    add.add_argument("--check", help=say("shell.help.add_check"))
    add.set_defaults(func=shell.add)


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
        home = str(config.config_home(os.environ) / "env")
        env = Phrase("shell.no_token_where", {"home": home})
        print(terminal()("shell.no_token", env=env), file=sys.stderr)
        return 2
    if not settings.allowed_users:
        print(f"detach: {terminal()('shell.run_no_users')}", file=sys.stderr)
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
        print(f"detach: {terminal()('shell.worker_needs_database')}", file=sys.stderr)
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
