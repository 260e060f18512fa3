"""The shell's side of ``detach``: queue a goal for the running bot (``add``), and list, show,
export or archive tasks, on the bot's database and settings."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import re
import sys
import unicodedata
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bot import config
from bot.errors import ConfigError, TaskNotFound
from bot.models import ApprovalMode, TaskKind
from bot.money.presets import PresetCatalog
from bot.redaction import Redactor
from bot.settings import Settings, key_variables, known_secrets
from bot.telegram.render import usd
from bot.telegram.slugs import slugify
from bot.turns.transcript import human_line
from bot.workdirs import WorkdirPolicy
from executors import registry

if TYPE_CHECKING:
    from bot.tasks.console import ConsoleTasks
    from bot.tasks.planning import Planned, TaskPlanner


def shell_settings() -> Settings:
    """The settings, from the one settings file wherever the shell is (``bot.config``);
    notes for the person (an earlier ./data still in use) go to stderr."""
    settings, notes = config.load_settings()
    for note in notes:
        print(f"detach: note: {note}", file=sys.stderr)
    return settings


async def with_console(
    settings: Settings, work: Callable[[ConsoleTasks], Awaitable[int | None]], create: bool = True
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
    from bot.tasks.console import ConsoleTasks  # the bot's imports, once a command runs

    async with ConsoleTasks.opened(url, Redactor.of(secrets)) as console:
        return int(await work(console) or 0)


def add(args: argparse.Namespace) -> int:
    """``detach add [key=value ...] goal``: planned as the chat plans ``/detach`` (the same
    options, defaults and errors; ``--model`` and the other flags are those options), the
    shell's directory by default; prints the task's number once it has one."""
    settings = shell_settings()
    if not settings.allowed_users:
        raise ConfigError("DETACH_ALLOWED_USERS is empty: nobody to report the task to")
    owner = args.chat if args.chat in settings.allowed_users else min(settings.allowed_users)
    text = " ".join(typed_options([*flag_options(args), *args.goal]))

    async def work(console: ConsoleTasks) -> None:
        planned = await plan_add(settings, console, owner, args.chat or owner, text, Path.cwd())
        if planned.new.note:
            print(f"detach: note: {planned.new.note}", file=sys.stderr)
        await hand_off(settings, console, planned)

    return asyncio.run(with_console(settings, work))


async def plan_add(
    settings: Settings, console: ConsoleTasks, owner: int, chat_id: int, text: str, here: Path
) -> Planned:
    """What ``detach add`` asks for, planned by the chat's own road
    (``TaskPlanner.plan_text``): a NewTask, or the ``UserInputError`` the chat would answer.
    ``here``: the directory where ``text`` names none (the shell's)."""
    planner = shell_planner(settings, console)
    locale = await console.locale_of(owner)
    planned = await planner.plan_text(
        owner, chat_id, TaskKind.DETACH, text, locale, "detach", defaults={"cwd": str(here)}
    )
    return dataclasses.replace(planned, new=dataclasses.replace(planned.new, announced=False))


def shell_planner(settings: Settings, console: ConsoleTasks) -> TaskPlanner:
    """The bot's planner as the shell has it (``ConsoleTasks.planner``), its git guarded as
    the bot's is."""
    from bot.core import read_denial
    from executors.gitguard import GitGuard

    guard = GitGuard(read_denial(settings, os.environ).paths)
    catalog = PresetCatalog.load(settings.config, registry.builtin_presets())
    return console.planner(settings, guard, catalog)


def flag_options(args: argparse.Namespace) -> list[str]:
    """``--model`` and the other flags as the ``key=value`` options they stand for; ``--cwd``
    from the shell's directory, as a shell's path is (a typed ``cwd=`` is the chat's)."""
    worktree = None if args.worktree is None else ("yes" if args.worktree else "no")
    given = {
        "model": args.model,
        "engine": args.engine,
        "mode": args.mode,
        "cwd": str(Path(args.cwd).expanduser().absolute()) if args.cwd else None,
        "worktree": worktree,
        "check": args.check,
    }
    return [f"{key}={value}" for key, value in given.items() if value is not None]


def typed_options(words: list[str]) -> list[str]:
    """The shell's words as the chat would have them typed: a leading option whose value
    has spaces (the shell took its quotes off) quoted again."""
    out: list[str] = []
    for n, word in enumerate(words):
        key, eq, value = word.partition("=")
        if not (eq and re.fullmatch(r"[a-z_]+", key)):
            return out + words[n:]
        quote = "'" if '"' in value else '"'
        out.append(f"{key}={quote}{value}{quote}" if re.search(r"\s", value) else word)
    return out


async def hand_off(settings: Settings, console: ConsoleTasks, planned: Planned) -> None:
    """The planned task to the bot: a worktree or sandboxed one, or any when the bot's preflight
    is on (it may hold the task), as a task file (the bot cuts the worktree and knows its
    sandbox; it plans the file by the same road), which a running bot takes at once; any other
    straight into the database, announced by the bot."""
    new = planned.new
    preflighted = settings.preflight or settings.default_engine == "auto"  # the bot may hold it
    if new.worktree or new.approval_mode is ApprovalMode.SANDBOX or preflighted:
        await _through_inbox(settings, console, planned)
        return
    task, until = await console.queue(new)
    if until is not None:
        print(
            f"{task.label} waits for {new.engine}'s usage limit (until {until:%Y-%m-%d %H:%M} UTC)"
        )
    print(f"{task.label} queued; {_who_reports(settings, task.chat_id)}")


async def _through_inbox(settings: Settings, console: ConsoleTasks, planned: Planned) -> None:
    """A task file with the options as typed (the directory resolved); a running bot takes
    it within seconds (its number is printed, or its reason for refusing it)."""
    from datetime import UTC, datetime

    from bot.mcp.handoff import START_WAIT_S, taken
    from bot.tasks.taskfile import SHELL_CLIENT, TaskFile, drop

    new, typed = planned.new, planned.options
    tf = TaskFile(
        goal=new.prompt,
        created=datetime.now(UTC),
        chat_id=new.chat_id,
        cwd=str(new.cwd),
        model=typed.get("model"),
        engine=typed.get("engine"),
        worktree=typed.get("worktree"),
        mode=typed.get("mode"),
        check=typed.get("check"),
        max_usd=typed.get("max_usd"),
        subtasks=typed.get("subtasks"),
        client=SHELL_CLIENT,  # the chat says it came from the shell, not from a file
    )
    target = drop(settings.data_dir / "inbox", tf, slugify(new.prompt))
    where = "its own worktree" if new.worktree else "its directory"
    if not _bot_runs(settings):
        print(
            f"queued, not numbered yet; {_NOT_RUNNING}: once you start it (`make run`) the bot "
            f"numbers it, starts it in {where} and reports in chat {new.chat_id}"
        )
        return
    task = await console.get(await taken(target, START_WAIT_S))
    assert task is not None  # the bot took it: it is a task now
    print(f"{task.label} queued in {where}; the running bot reports in chat {task.chat_id}")


def adopt(args: argparse.Namespace) -> int:
    """``detach adopt <id>``: the session becomes a task of the machine's owner (the first of
    ``Settings.owners``, or ``--chat`` when it names one of them, or a group); the running bot
    sends its card. Prints its label."""
    import os

    from bot.tasks.adoption import Adoptee, adopted_mode, locate

    settings = shell_settings()
    if not settings.allowed_users:
        raise ConfigError("DETACH_ALLOWED_USERS is empty: nobody to give the task to")
    if args.chat in settings.allowed_users and args.chat not in settings.owners:
        raise ConfigError(f"--chat {args.chat}: this machine's sessions are its owner's only")
    owner = args.chat if args.chat in settings.owners else settings.owners[0]
    policy = WorkdirPolicy(settings.default_workdir, settings.allowed_workdirs)
    cwd = Path(args.cwd).expanduser() if args.cwd else None
    found, where = locate(os.environ, policy, registry.names(), args.id, cwd)

    async def work(console: ConsoleTasks) -> None:
        locale = await console.locale_of(owner)  # the owner's /lang
        mode = adopted_mode(settings.approval_mode)
        who = Adoptee(owner, args.chat or owner, locale, mode, announced=False)
        catalog = PresetCatalog.load(settings.config, registry.builtin_presets())
        task = await console.adopt(found, where, who, catalog)
        print(
            f"{task.label} adopted ({found.engine} session in {where}); "
            f"{_who_reports(settings, task.chat_id)}"
        )

    return asyncio.run(with_console(settings, work))


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
    async def work(console: ConsoleTasks) -> None:
        for task, ran in await console.recent():
            print(
                f"{task.label:32} {task.status.value:12} {task.engine:7} "
                f"{task.created_at:%Y-%m-%d %H:%M} ${usd(task.total_cost_usd)}"
                + f"  model={task.model or 'default'} ran={_named(ran)}"
            )

    return asyncio.run(with_console(shell_settings(), work, create=False))


def show(args: argparse.Namespace) -> int:
    async def work(console: ConsoleTasks) -> int:
        shown = await console.shown(args.id)
        if shown is None:
            print(f"detach: no task #{args.id}", file=sys.stderr)
            return 1
        task = shown.task
        print(
            f"{task.label}  [{task.status.value}]  engine={task.engine} "
            f"model={task.model or 'default'} ran={_named(shown.ran)}\n"
            f"goal: {task.title}\ncwd: {task.cwd}\n"
            f"session: {task.session_id}\nmode: {task.approval_mode.value}"
            + (f"\ncheck: {task.check}" if task.check else "")
        )
        check = shown.check
        if check is not None:
            verdict = "passed" if check.passed else f"failed (exit {check.exit_code})"
            print(
                f"check {verdict} in round {check.round}, {check.duration_s:.1f} s:\n"
                + "\n".join("  " + line for line in check.tail(1500).splitlines()[-20:])
            )
        turn = shown.turn
        if turn:
            from bot.telegram.texts import DEFAULT_LOCALE, Texts

            error = Texts().error(DEFAULT_LOCALE, turn.error) if turn.error else ""
            cost = f"${usd(turn.cost_usd)}" if turn.cost_usd is not None else "unknown"
            print(
                _printable(
                    f"\nturn {turn.seq} [{turn.status.value}] cost {cost}\n"
                    f"{turn.result_text or error}"
                )
            )
        for line in shown.lines:
            readable = human_line(line.kind, line.body)
            if readable is not None:
                print(_printable(f"  {readable}"))
        return 0

    return asyncio.run(with_console(shell_settings(), work, create=False))


def _named(ran: str | None) -> str:
    """The model that ran as its engine named it (hostile: one printable word run)."""
    return _printable(" ".join(ran.split())) if ran else "not yet"


def _printable(text: str) -> str:
    """The agent's words for a terminal: control characters (escape sequences that could
    rewrite the screen or the title) shown as ``?``, lines and tabs kept."""
    return "".join(c if c in "\n\t" or unicodedata.category(c) != "Cc" else "?" for c in text)


def export(args: argparse.Namespace) -> int:
    async def work(console: ConsoleTasks) -> int:
        try:
            if args.jsonl:
                await console.export_jsonl(args.id, sys.stdout, max(args.after, 0))
            else:
                sys.stdout.write(await console.export(args.id))
        except TaskNotFound:  # the chat's words name /tasks; a shell names its own command
            print(f"detach: no task #{args.id} (`detach list` lists them)", file=sys.stderr)
            return 1
        return 0

    return asyncio.run(with_console(shell_settings(), work, create=False))


def archive(args: argparse.Namespace) -> int:
    if not args.all and args.id is None:
        print("detach: give a task id or --all", file=sys.stderr)
        return 1

    async def work(console: ConsoleTasks) -> int:
        if args.all:
            print(f"archived {await console.archive_all()} task(s)")
            return 0
        task = await console.archive(args.id)
        if task is None:
            print(f"detach: task #{args.id} is missing or still active", file=sys.stderr)
            return 1
        print(f"archived {task.label}")
        return 0

    return asyncio.run(with_console(shell_settings(), work, create=False))
