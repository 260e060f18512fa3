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

from bot import config
from bot.errors import ConfigError, DetachError, UserInputError
from bot.models import ApprovalMode, NewTask, TaskKind, TaskStatus
from bot.money.desk import resolve_preset
from bot.money.presets import PresetCatalog
from bot.settings import Settings
from bot.store import Store
from bot.tasks.workdirs import WorkdirPolicy
from bot.telegram.render import plain, slugify
from executors import registry

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


def _settings() -> Settings:
    """The settings, from the one settings file wherever the shell is (``bot.config``);
    notes for the person (an earlier ./data still in use) go to stderr."""
    settings, notes = config.load_settings()
    for note in notes:
        print(f"detach: note: {note}", file=sys.stderr)
    return settings


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
    mcp.set_defaults(func=_mcp)
    add = sub.add_parser("add", help="queue a goal; the running bot starts it and reports")
    add.add_argument("goal", nargs="+")
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
    add.set_defaults(func=_add)
    sub.add_parser("list", help="list tasks").set_defaults(func=_list)
    show = sub.add_parser("show", help="show a task, its turns and transcript tail")
    show.add_argument("id", type=int)
    show.set_defaults(func=_show)
    export_ = sub.add_parser(
        "export",
        help="print a task as a task file (the detach skill's "
        "Markdown); drop such a file into DATA_DIR/inbox/ to start a task",
    )
    export_.add_argument("id", type=int)
    export_.set_defaults(func=_export)
    archive = sub.add_parser("archive", help="archive a finished task, or all of them")
    archive.add_argument("id", nargs="?", type=int)
    archive.add_argument("--all", action="store_true")
    archive.set_defaults(func=_archive)
    return parser


def _logging() -> None:
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("aiogram.event").setLevel(logging.WARNING)


def _init(args: argparse.Namespace) -> int:
    from bot import pairing
    from bot.settings import TELEGRAM_API_URL

    given = os.environ.get(config.ENV_FILE_VAR)
    target = Path(given).expanduser() if given else config.config_home(os.environ) / "env"
    api = os.environ.get("DETACH_TELEGRAM_API_URL") or TELEGRAM_API_URL
    return pairing.pair(target, api, args.token)


def _run(_args: argparse.Namespace) -> int:
    settings = _settings()
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
    settings = _settings()
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


async def _with_store(settings: Settings, work, create: bool = True) -> int:  # type: ignore[no-untyped-def]
    """Run ``work`` on the bot's database; a command that only reads (``create=False``) does
    not create one where there is none, and says where it looked."""
    url = settings.resolved_database_url
    if not create and url.startswith("sqlite") and not Path(url.split("///", 1)[-1]).exists():
        raise ConfigError(
            f"no database at {url.split('///', 1)[-1]}: the bot has not run with these settings "
            f"yet ({config.describe()})"
        )
    store = await Store.open(url)
    try:
        return int(await work(store) or 0)
    finally:
        await store.close()


def _mcp(args: argparse.Namespace) -> int:
    """`detach mcp`: the MCP server, on this machine's settings and the bot's database."""
    from bot.mcp.command import plan, serve

    settings = _settings()
    place, endpoint = plan(settings, args.http)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)

    async def work(store: Store) -> None:
        await serve(store, place, endpoint, args.parent)

    return asyncio.run(_with_store(settings, work, create=False))


def _add(args: argparse.Namespace) -> int:
    settings = _settings()
    if not settings.allowed_users:
        raise ConfigError("DETACH_ALLOWED_USERS is empty: nobody to report the task to")
    owner = args.chat if args.chat in settings.allowed_users else min(settings.allowed_users)
    goal = " ".join(args.goal).strip()
    if not goal or len(goal) > settings.max_prompt_chars:
        raise ConfigError(f"the goal must have 1 to {settings.max_prompt_chars} characters")
    preset = None
    if args.model:  # resolved at capture: fail fast with the same suggestions as in Telegram
        preset = resolve_preset(
            PresetCatalog.load(settings.config, registry.builtin_presets()), args.model
        )
    engine = args.engine or (preset.engine if preset else settings.default_engine)
    if preset is not None and preset.engine != engine:
        raise ConfigError(f"preset {preset.name} runs on {preset.engine}, not {engine}")
    mode = ApprovalMode(args.mode) if args.mode else settings.detach_mode
    new_cwd = _workdir(settings, args.cwd)
    new = NewTask(
        owner_id=owner,
        chat_id=args.chat or owner,
        engine=engine,
        kind=TaskKind.DETACH,
        prompt=goal,
        cwd=new_cwd,
        announced=False,
        preset=preset.name if preset else None,
        model=preset.model if preset else None,
        max_usd=settings.task_cap_usd,
        approval_mode=mode,
        check=_check(args.check, new_cwd),
    )
    if (
        args.worktree
        or (args.worktree is None and settings.worktrees)
        or mode is ApprovalMode.SANDBOX
    ):
        return _add_through_inbox(settings, new, args, explicit=bool(args.worktree))

    async def work(store: Store) -> None:
        until = (await store.limits.active()).get(engine)
        task, _ = await store.tasks.create(new, slugify(goal), waits=until is not None)
        await store.audit.record("task_created", owner, task.id, "shell")
        if until is not None:
            print(
                f"{task.label} waits for {engine}'s usage limit (until {until:%Y-%m-%d %H:%M} UTC)"
            )
        print(f"{task.label} queued; the running bot will report in chat {task.chat_id}")

    return asyncio.run(_with_store(settings, work))


def _check(given: str | None, cwd: Path) -> str | None:
    """``--check``, else the repository's ``.detach.toml`` (``--check no``: none)."""
    from bot.tasks.checks import given_check, repository_check
    from bot.worktrees.git import top_level

    if given is not None:
        return given_check(given)
    top = asyncio.run(top_level(cwd))
    return repository_check(top) if top is not None else None


def _add_through_inbox(
    settings: Settings, new: NewTask, args: argparse.Namespace, explicit: bool
) -> int:
    """A worktree or sandboxed task is a task file in the inbox: the bot cuts the worktree
    and knows whether its sandbox works when it starts it (the same path as any program
    dropping a file there). Without ``explicit`` the bot's default applies (a worktree where
    the directory is in a repository)."""
    from datetime import UTC, datetime

    from bot.intake.taskfile import TaskFile, drop

    target = drop(
        settings.data_dir / "inbox",
        TaskFile(
            goal=new.prompt,
            created=datetime.now(UTC),
            chat_id=new.chat_id,
            model=new.preset,
            cwd=str(new.cwd),
            engine=args.engine,
            worktree="yes" if explicit else ("no" if args.worktree is False else None),
            mode=args.mode,
            check=new.check or ("no" if args.check is not None else None),
        ),
        slugify(new.prompt),
    )
    where = (
        "its own worktree"
        if explicit
        else "its own worktree when in a repository"
        if args.worktree is None
        else "its directory"
    )
    print(
        f"queued as {target}; the running bot starts it in {where} and reports in chat "
        f"{new.chat_id}"
    )
    return 0


def _workdir(settings: Settings, typed: str | None) -> Path:
    """--cwd, else the shell's directory; either must be inside the allowed directories."""
    policy = WorkdirPolicy(settings.default_workdir, settings.allowed_workdirs)
    return policy.resolve(typed or str(Path.cwd()), Path.cwd())


def _list(_args: argparse.Namespace) -> int:
    async def work(store: Store) -> None:
        for task in await store.tasks.list_for(None, limit=50):
            print(
                f"{task.label:32} {task.status.value:12} {task.engine:7} "
                f"{task.created_at:%Y-%m-%d %H:%M} ${task.total_cost_usd:.4f}"
            )

    return asyncio.run(_with_store(_settings(), work, create=False))


def _show(args: argparse.Namespace) -> int:
    async def work(store: Store) -> int:
        task = await store.tasks.get(args.id)
        if task is None:
            print(f"detach: no task #{args.id}", file=sys.stderr)
            return 1
        print(
            f"{task.label}  [{task.status.value}]  engine={task.engine} "
            f"model={task.model or 'default'}\ngoal: {task.title}\ncwd: {task.cwd}\n"
            f"session: {task.session_id}\nmode: {task.approval_mode.value}"
            + (f"\ncheck: {task.check}" if task.check else "")
        )
        check = await store.checks.last(task.id)
        if check is not None:
            verdict = "passed" if check.passed else f"failed (exit {check.exit_code})"
            print(
                f"check {verdict} in round {check.round}, {check.duration_s:.1f} s:\n"
                + "\n".join("  " + line for line in check.tail(1500).splitlines()[-20:])
            )
        turn = await store.tasks.last_turn(task.id)
        if turn:
            from bot.telegram.texts import DEFAULT_LOCALE, Texts

            error = Texts().error(DEFAULT_LOCALE, turn.error) if turn.error else ""
            print(
                f"\nturn {turn.seq} [{turn.status.value}] cost={turn.cost_usd}\n"
                f"{turn.result_text or error}"
            )
        for line in await store.transcript.tail(task.id, 20):
            print(f"  {line.kind}: {str(line.body)[:160]}")
        return 0

    return asyncio.run(_with_store(_settings(), work, create=False))


def _export(args: argparse.Namespace) -> int:
    from bot.intake.inbox import export  # the bot's imports, only for this command

    async def work(store: Store) -> None:
        from bot.telegram.texts import Texts

        sys.stdout.write(await export(store, args.id, Texts()))

    return asyncio.run(_with_store(_settings(), work, create=False))


def _archive(args: argparse.Namespace) -> int:
    if not args.all and args.id is None:
        print("detach: give a task id or --all", file=sys.stderr)
        return 1

    async def work(store: Store) -> int:
        if args.all:
            print(f"archived {len(await store.tasks.archive_finished(None))} task(s)")
            return 0
        task = await store.tasks.get(args.id)
        if task is None or task.status.active:
            print(f"detach: task #{args.id} is missing or still active", file=sys.stderr)
            return 1
        await store.tasks.set_status(task.id, TaskStatus.ARCHIVED)
        print(f"archived {task.label}")
        return 0

    return asyncio.run(_with_store(_settings(), work, create=False))
