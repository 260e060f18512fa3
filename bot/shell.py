"""The shell's side of ``detach``: queue a goal for the running bot (``add``), and list, show,
export or archive tasks, on the bot's database and settings."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import unicodedata
from collections.abc import Awaitable, Callable
from pathlib import Path

from bot import config
from bot.errors import ConfigError
from bot.models import ApprovalMode, NewTask, OutboxOp, TaskKind, TaskStatus
from bot.money.desk import resolve_preset
from bot.money.presets import PresetCatalog
from bot.redaction import Redactor
from bot.settings import Settings, key_variables, known_secrets
from bot.store import Store
from bot.telegram.render import slugify, usd
from bot.turns.transcript import human_line
from bot.workdirs import WorkdirPolicy
from executors import registry


def shell_settings() -> Settings:
    """The settings, from the one settings file wherever the shell is (``bot.config``);
    notes for the person (an earlier ./data still in use) go to stderr."""
    settings, notes = config.load_settings()
    for note in notes:
        print(f"detach: note: {note}", file=sys.stderr)
    return settings


async def with_store(
    settings: Settings, work: Callable[[Store], Awaitable[int | None]], create: bool = True
) -> int:
    """Run ``work`` on the bot's database; a command that only reads (``create=False``) does
    not create one where there is none, and says where it looked."""
    url = settings.resolved_database_url
    if not create and url.startswith("sqlite") and not Path(url.split("///", 1)[-1]).exists():
        raise ConfigError(
            f"no database at {url.split('///', 1)[-1]}: the bot has not run with these settings "
            f"yet ({config.describe()})"
        )
    presets = PresetCatalog.load(settings.config, registry.builtin_presets())
    secrets = known_secrets(settings, os.environ, key_variables(settings, presets.all()))
    store = await Store.open(url, redact=Redactor.of(secrets))
    try:
        return int(await work(store) or 0)
    finally:
        await store.close()


def add(args: argparse.Namespace) -> int:
    settings = shell_settings()
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
    engine = args.engine or (preset.engine if preset else settings.base_engine)
    if preset is not None and preset.engine != engine:
        raise ConfigError(f"preset {preset.name} runs on {preset.engine}, not {engine}")
    mode = ApprovalMode(args.mode) if args.mode else settings.detach_mode
    new_cwd = _workdir(settings, args.cwd)
    check, check_repository = _check(args.check, new_cwd, settings)
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
        check=check,
        check_repository=check_repository,
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
        print(f"{task.label} queued; {_who_reports(settings, task.chat_id)}")

    return asyncio.run(with_store(settings, work))


def adopt(args: argparse.Namespace) -> int:
    """``detach adopt <id>``: the session becomes a task of the machine's owner (the first of
    ``Settings.owners``, or ``--chat`` when it names one of them, or a group); the running bot
    sends its card. Prints its label."""
    import os

    from bot.tasks.adoption import Adoptee, adopted_mode, locate, record

    settings = shell_settings()
    if not settings.allowed_users:
        raise ConfigError("DETACH_ALLOWED_USERS is empty: nobody to give the task to")
    if args.chat in settings.allowed_users and args.chat not in settings.owners:
        raise ConfigError(f"--chat {args.chat}: this machine's sessions are its owner's only")
    owner = args.chat if args.chat in settings.owners else settings.owners[0]
    policy = WorkdirPolicy(settings.default_workdir, settings.allowed_workdirs)
    cwd = Path(args.cwd).expanduser() if args.cwd else None
    found, where = locate(os.environ, policy, registry.names(), args.id, cwd)

    async def work(store: Store) -> None:
        locale = (await store.users.locales()).get(owner, "en")  # the owner's /lang
        mode = adopted_mode(settings.approval_mode)
        who = Adoptee(owner, args.chat or owner, locale, mode, announced=False)
        task, _ = await record(store, found, where, who)
        print(
            f"{task.label} adopted ({found.engine} session in {where}); "
            f"{_who_reports(settings, task.chat_id)}"
        )

    return asyncio.run(with_store(settings, work))


def _check(given: str | None, cwd: Path, settings: Settings) -> tuple[str | None, str | None]:
    """``--check`` (``--check no``: none), else the repository's ``.detach.toml`` (read now, so
    a broken one fails here), with that repository: its check runs once the owner approved it."""
    from bot.core import read_denial
    from bot.git import top_level
    from bot.tasks.checks import given_check, repository_check
    from executors.gitguard import GitGuard

    if given is not None:
        return given_check(given), None
    guard = GitGuard(read_denial(settings, os.environ).paths)
    top = asyncio.run(top_level(cwd, guard))
    command = repository_check(top) if top is not None else None
    return command, str(top) if command is not None else None


def _add_through_inbox(
    settings: Settings, new: NewTask, args: argparse.Namespace, explicit: bool
) -> int:
    """A worktree or sandboxed task is a task file in the inbox: the bot cuts the worktree
    and knows whether its sandbox works when it starts it (the same path as any program
    dropping a file there). Without ``explicit`` the bot's default applies (a worktree where
    the directory is in a repository)."""
    from datetime import UTC, datetime

    from bot.tasks.taskfile import TaskFile, drop

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
            # the owner's --check only: a task file's check counts as typed by the owner, the
            # repository's is read (and asked for) by the bot itself
            check=None
            if new.check_repository
            else new.check or ("no" if args.check is not None else None),
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
    if _bot_runs(settings):
        print(
            f"queued as {target}; the running bot starts it in {where} and reports in chat "
            f"{new.chat_id}"
        )
    else:
        print(
            f"queued as {target}; {_NOT_RUNNING}: the bot starts it in {where} and reports in "
            f"chat {new.chat_id} once you start it (`make run`)"
        )
    return 0


_NOT_RUNNING = "no bot is running on this machine (no heartbeat in its data directory)"


def _bot_runs(settings: Settings) -> bool:
    """Whether a bot runs on these settings' data directory (its heartbeat is fresh)."""
    from bot.mcp.handoff import heartbeat_fresh

    return heartbeat_fresh(settings.data_dir / config.ALIVE_FILE)


def _who_reports(settings: Settings, chat_id: int) -> str:
    """What happens next to a task the shell queued: the running bot reports it, or none
    runs and the task waits."""
    if _bot_runs(settings):
        return f"the running bot will report in chat {chat_id}"
    return (
        f"{_NOT_RUNNING}: the task waits until you start it (`make run`), then it reports "
        f"in chat {chat_id}"
    )


def _workdir(settings: Settings, typed: str | None) -> Path:
    """--cwd, else the shell's directory; either must be inside the allowed directories."""
    policy = WorkdirPolicy(settings.default_workdir, settings.allowed_workdirs)
    return policy.resolve(typed or str(Path.cwd()), Path.cwd())


def list_tasks(_args: argparse.Namespace) -> int:
    async def work(store: Store) -> None:
        for task in await store.tasks.list_for(None, limit=50):
            print(
                f"{task.label:32} {task.status.value:12} {task.engine:7} "
                f"{task.created_at:%Y-%m-%d %H:%M} ${usd(task.total_cost_usd)}"
            )

    return asyncio.run(with_store(shell_settings(), work, create=False))


def show(args: argparse.Namespace) -> int:
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
            cost = f"${usd(turn.cost_usd)}" if turn.cost_usd is not None else "n/a"
            print(
                _printable(
                    f"\nturn {turn.seq} [{turn.status.value}] cost {cost}\n"
                    f"{turn.result_text or error}"
                )
            )
        for line in await store.transcript.tail(task.id, 20):
            readable = human_line(line.kind, line.body)
            if readable is not None:
                print(_printable(f"  {readable}"))
        return 0

    return asyncio.run(with_store(shell_settings(), work, create=False))


def _printable(text: str) -> str:
    """The agent's words for a terminal: control characters (escape sequences that could
    rewrite the screen or the title) shown as ``?``, lines and tabs kept."""
    return "".join(c if c in "\n\t" or unicodedata.category(c) != "Cc" else "?" for c in text)


def export(args: argparse.Namespace) -> int:
    from bot.tasks.export import export  # the bot's imports, only for this command

    async def work(store: Store) -> None:
        from bot.telegram.texts import Texts

        sys.stdout.write(await export(store, args.id, Texts()))

    return asyncio.run(with_store(shell_settings(), work, create=False))


async def _close_topic(store: Store, task_id: int) -> None:
    """An archived task's forum topic is closed (renamed in a private chat) as ``/archive``
    does: a row in the outbox, which the running bot delivers within a second."""
    _, key = await store.topics.key_of(task_id)
    task = await store.tasks.get(task_id)
    if key is not None and task is not None:
        await store.outbox.add(task.chat_id, OutboxOp.CLOSE_TOPIC, {}, task_id, None)


def archive(args: argparse.Namespace) -> int:
    if not args.all and args.id is None:
        print("detach: give a task id or --all", file=sys.stderr)
        return 1

    async def work(store: Store) -> int:
        if args.all:
            archived = await store.tasks.archive_finished(None)
            for done in archived:
                await _close_topic(store, done.id)
            print(f"archived {len(archived)} task(s)")
            return 0
        task = await store.tasks.get(args.id)
        if task is None or task.status.active:
            print(f"detach: task #{args.id} is missing or still active", file=sys.stderr)
            return 1
        await store.tasks.set_status(task.id, TaskStatus.ARCHIVED)
        await _close_topic(store, task.id)
        print(f"archived {task.label}")
        return 0

    return asyncio.run(with_store(shell_settings(), work, create=False))
