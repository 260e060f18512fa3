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
from bot.models import ApprovalMode, CheckResult, Phrase, Task, TaskKind, Turn
from bot.money.presets import PresetCatalog
from bot.redaction import Redactor
from bot.settings import Settings, key_variables, known_secrets
from bot.telegram.render import usd
from bot.telegram.slugs import slugify
from bot.telegram.terminal_texts import TerminalTexts
from bot.turns.transcript import human_line
from bot.workdirs import WorkdirPolicy
from executors import registry

if TYPE_CHECKING:
    from bot.tasks.console import ConsoleTasks
    from bot.tasks.planning import Planned, TaskPlanner


def terminal() -> TerminalTexts:
    """The shell's words, in the language of its locale (``LC_ALL``, ``LC_MESSAGES``, ``LANG``)."""
    return TerminalTexts(os.environ)


def shell_settings() -> Settings:
    """The settings, from the one settings file wherever the shell is (``bot.config``);
    notes for the person (an earlier ./data still in use) go to stderr."""
    settings, notes = config.load_settings()
    for note in notes:
        print(f"detach: {terminal()('shell.note', note=note)}", file=sys.stderr)
    return settings


async def with_console(
    settings: Settings, work: Callable[[ConsoleTasks], Awaitable[int | None]], create: bool = True
) -> int:
    """Run ``work`` on the bot's database; a command that only reads (``create=False``) does
    not create one where there is none, and says where it looked."""
    url = settings.resolved_database_url
    if not create and url.startswith("sqlite") and not Path(url.split("///", 1)[-1]).exists():
        where = config.settings_words(os.environ, Path.cwd())
        path = url.split("///", 1)[-1]
        raise ConfigError(Phrase("shell.no_database", {"path": path, "settings": where}))
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
        raise ConfigError(Phrase("shell.no_users_report"))
    owner = args.chat if args.chat in settings.allowed_users else min(settings.allowed_users)
    text = " ".join(typed_options([*flag_options(args), *args.goal]))

    async def work(console: ConsoleTasks) -> None:
        planned = await plan_add(settings, console, owner, args.chat or owner, text, Path.cwd())
        if planned.new.note:
            print(f"detach: {terminal()('shell.note', note=planned.new.note)}", file=sys.stderr)
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
    say = terminal()
    task, until = await console.queue(new)
    if until is not None:
        print(
            say("shell.waits_limit", label=task.label, engine=new.engine, until=say.moment(until))
        )
    print(say("shell.queued", label=task.label, next=_who_reports(settings, task.chat_id)))


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
    say = terminal()
    where = Phrase("shell.where_worktree" if new.worktree else "shell.where_directory")
    if not _bot_runs(settings):
        print(
            say("shell.queued_unnumbered", not_running=_NOT_RUNNING, where=where, chat=new.chat_id)
        )
        return
    task = await console.get(await taken(target, START_WAIT_S))
    assert task is not None  # the bot took it: it is a task now
    print(say("shell.queued_in", label=task.label, where=where, chat=task.chat_id))


def adopt(args: argparse.Namespace) -> int:
    """``detach adopt <id>``: the session becomes a task of the machine's owner (the first of
    ``Settings.owners``, or ``--chat`` when it names one of them, or a group); the running bot
    sends its card. Prints its label."""
    import os

    from bot.tasks.adoption import Adoptee, adopted_mode, locate

    settings = shell_settings()
    if not settings.allowed_users:
        raise ConfigError(Phrase("shell.no_users_give"))
    if args.chat in settings.allowed_users and args.chat not in settings.owners:
        raise ConfigError(Phrase("shell.owner_only", {"chat": args.chat}))
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
        who_reports = _who_reports(settings, task.chat_id)
        said = dict(label=task.label, engine=found.engine, where=str(where), next=who_reports)
        print(terminal()("shell.adopted", **said))

    return asyncio.run(with_console(settings, work))


_NOT_RUNNING = Phrase("shell.not_running")


def _bot_runs(settings: Settings) -> bool:
    """Whether a bot runs on these settings' data directory (its heartbeat is fresh)."""
    from bot.mcp.handoff import heartbeat_fresh

    return heartbeat_fresh(settings.data_dir / config.ALIVE_FILE)


def _who_reports(settings: Settings, chat_id: int) -> Phrase:
    """What happens next to a task the shell queued: the running bot reports it, or none
    runs and the task waits."""
    if _bot_runs(settings):
        return Phrase("shell.bot_reports", {"chat": chat_id})
    return Phrase("shell.task_waits", {"not_running": _NOT_RUNNING, "chat": chat_id})


def _workdir(settings: Settings, typed: str | None) -> Path:
    """--cwd, else the shell's directory; either must be inside the allowed directories."""
    policy = WorkdirPolicy(settings.default_workdir, settings.allowed_workdirs)
    return policy.resolve(typed or str(Path.cwd()), Path.cwd())


def list_tasks(_args: argparse.Namespace) -> int:
    say = terminal()

    async def work(console: ConsoleTasks) -> None:
        for task, ran in await console.recent():
            status = say.texts.status(say.locale, task.status)
            models = say("shell.list_models", model=_asked(say, task), ran=_named(say, ran))
            print(
                f"{task.label:32} {status:12} {task.engine:7} "
                f"{say.moment(task.created_at)} ${usd(task.total_cost_usd)}  {models}"
            )

    return asyncio.run(with_console(shell_settings(), work, create=False))


def show(args: argparse.Namespace) -> int:
    say = terminal()

    async def work(console: ConsoleTasks) -> int:
        shown = await console.shown(args.id)
        if shown is None:
            print(f"detach: {say('shell.no_task', id=args.id)}", file=sys.stderr)
            return 1
        print(_task_lines(say, shown.task, shown.ran))
        if shown.check is not None:
            print(_check_lines(say, shown.check))
        if shown.turn:
            print(_printable(_turn_lines(say, shown.turn)))
        for line in shown.lines:
            readable = human_line(line.kind, line.body)
            if readable is not None:
                print(_printable(f"  {readable}"))
        return 0

    return asyncio.run(with_console(shell_settings(), work, create=False))


def _task_lines(say: TerminalTexts, task: Task, ran: str | None) -> str:
    """A task's head for ``detach show``: its label, state, engine, goal and where it runs."""
    status = say.texts.status(say.locale, task.status)
    model, named = _asked(say, task), _named(say, ran)
    head = dict(label=task.label, status=status, engine=task.engine, model=model, ran=named)
    lines = [
        say("shell.task_head", **head),
        say("shell.task_goal", goal=task.title),
        say("shell.task_cwd", cwd=str(task.cwd)),
        say("shell.task_session", session=task.session_id or "–"),
        say("shell.task_mode", mode=task.approval_mode.value),
    ]
    return "\n".join(lines + ([say("shell.task_check", check=task.check)] if task.check else []))


def _check_lines(say: TerminalTexts, check: CheckResult) -> str:
    """The last check's verdict and the tail of what it printed."""
    seconds = say.decimal(check.duration_s)
    if check.passed:
        head = say("shell.check_passed", round=check.round, seconds=seconds)
    else:
        head = say("shell.check_failed", code=check.exit_code, round=check.round, seconds=seconds)
    return "\n".join([head, *("  " + line for line in check.tail(1500).splitlines()[-20:])])


def _turn_lines(say: TerminalTexts, turn: Turn) -> str:
    """The last turn: its number, state and cost, and its answer (or why it has none)."""
    error = say.texts.error(say.locale, turn.error) if turn.error else ""
    cost = f"${usd(turn.cost_usd)}" if turn.cost_usd is not None else say("shell.cost_unknown")
    status = say.texts.status(say.locale, turn.status)
    head = say("shell.turn", seq=turn.seq, status=status, cost=cost)
    return f"\n{head}\n{turn.result_text or error}"


def _asked(say: TerminalTexts, task: Task) -> str:
    return task.model or say("shell.model_default")


def _named(say: TerminalTexts, ran: str | None) -> str:
    """The model that ran as its engine named it (hostile: one printable word run)."""
    return _printable(" ".join(ran.split())) if ran else say("shell.model_not_yet")


def _printable(text: str) -> str:
    """The agent's words for a terminal: control characters (escape sequences that could
    rewrite the screen or the title) shown as ``?``, lines and tabs kept."""
    return "".join(c if c in "\n\t" or unicodedata.category(c) != "Cc" else "?" for c in text)


def export(args: argparse.Namespace) -> int:
    """The task file, or its transcript as JSON lines: both as they are, in no language."""

    async def work(console: ConsoleTasks) -> int:
        try:
            if args.jsonl:
                await console.export_jsonl(args.id, sys.stdout, max(args.after, 0))
            else:
                sys.stdout.write(await console.export(args.id))
        except TaskNotFound:  # the chat's words name /tasks; a shell names its own command
            print(f"detach: {terminal()('shell.no_task_listed', id=args.id)}", file=sys.stderr)
            return 1
        return 0

    return asyncio.run(with_console(shell_settings(), work, create=False))


def archive(args: argparse.Namespace) -> int:
    say = terminal()
    if not args.all and args.id is None:
        print(f"detach: {say('shell.give_id')}", file=sys.stderr)
        return 1

    async def work(console: ConsoleTasks) -> int:
        if args.all:
            print(say.plural("shell.archived_count", await console.archive_all()))
            return 0
        task = await console.archive(args.id)
        if task is None:
            print(f"detach: {say('shell.not_archived', id=args.id)}", file=sys.stderr)
            return 1
        print(say("shell.archived", label=task.label))
        return 0

    return asyncio.run(with_console(shell_settings(), work, create=False))
