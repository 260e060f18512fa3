"""``/adopt <session id>`` and ``detach adopt``: a session started at a terminal becomes a task —
listed, with a card (its last answer), continued by a reply like any other. The engine and the
directory are the session files' (``executors.sessions``: read bounded, as hostile input); the
directory must be one a task may run in (``DETACH_ALLOWED_WORKDIRS``, as ``/cd``). Refused with
the reason: a malformed id, no such session on this machine, a directory outside the allowed
ones, a session that already is a task, an engine this bot does not run."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.errors import UserInputError
from bot.models import ApprovalMode, Engine, NewTask, Task, TaskKind, TaskStatus, Turn
from bot.money.pricing import Charge, Meter, PriceList
from bot.store import Store, TurnOutcome
from bot.telegram.notifier import Notifier
from bot.telegram.render import shorten
from bot.telegram.slugs import slugify
from bot.workdirs import WorkdirPolicy
from executors.sessions import FoundSession, find_session, valid_id

log = logging.getLogger(__name__)
TITLE_CHARS = 200


def adopted_mode(default: ApprovalMode) -> ApprovalMode:
    """An adopted session's approval mode: the chat's default for sessions, but never ``auto``
    (a session started elsewhere may have read anything: its next turn asks before it acts)."""
    return ApprovalMode.ASK if default is ApprovalMode.AUTO else default


@dataclass(frozen=True, slots=True)
class Adoptee:
    """Who adopts, and how its task is made: its chat, locale and approval mode."""

    owner_id: int
    chat_id: int
    locale: str
    mode: ApprovalMode
    announced: bool = True  # False: the shell's; the running bot sends its card


def locate(
    environ: Mapping[str, str],
    workdirs: WorkdirPolicy,
    engines: Collection[str],
    typed: str,
    cwd: Path | None = None,
) -> tuple[FoundSession, Path]:
    """The session ``typed`` names and its (allowed) directory, or a refusal saying why.
    ``cwd``: the directory the shell said it is in (it must be that one)."""
    session_id = valid_id(typed)
    if session_id is None:
        raise UserInputError("adopt.bad_id", id=typed)
    found = find_session(environ, session_id)
    if found is None:
        raise UserInputError("adopt.not_found", id=session_id)
    if not found.consistent:
        raise UserInputError("adopt.other_dir", id=session_id, path=found.cwd or "?")
    if found.engine not in engines:
        raise UserInputError("error.engine_unavailable", engine=found.engine)
    where = workdirs.resolve(found.cwd)  # refuses outside DETACH_ALLOWED_WORKDIRS
    if str(where) != found.cwd or (cwd is not None and cwd.resolve() != where):
        raise UserInputError("adopt.other_dir", id=session_id, path=found.cwd)
    return found, where


def charged(prices: PriceList, found: FoundSession) -> Charge:
    """What the session's tokens (as its file counts them) come to at this bot's prices, as
    the model the file names; no tokens known: no cost (the card says it is unknown)."""
    meter = Meter(prices, Engine(found.engine), None)
    meter.named(found.model or None)
    return meter.charge(found.usage) if found.usage else Charge(None, False, meter.model)


async def record(
    store: Store, found: FoundSession, where: Path, who: Adoptee, prices: PriceList
) -> tuple[Task, Turn]:
    """The task of an adopted session: done, its session the terminal's, its one turn the
    session's first prompt with its last answer and what its tokens cost. Refused when a task
    has that session."""
    async with store.atomic():
        existing = await store.terminal.task_with_session(found.engine, found.session_id)
        if existing is not None:
            raise UserInputError("adopt.already", id=found.session_id, task=existing)
        title = shorten(found.first_prompt or found.session_id, TITLE_CHARS, one_line=True)
        new = NewTask(
            owner_id=who.owner_id,
            chat_id=who.chat_id,
            engine=found.engine,
            kind=TaskKind.SESSION,
            prompt=title,
            cwd=where,
            locale=who.locale,
            announced=who.announced,
            approval_mode=who.mode,
        )
        task, turn = await store.tasks.create(new, slugify(title))
        await store.tasks.set_session(task.id, found.session_id)
        answer = found.last_answer.strip() or None
        charge, usage = charged(prices, found), found.usage
        outcome = TurnOutcome(
            TaskStatus.DONE,
            answer,
            cost_usd=charge.cost_usd,
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            model=found.model or None,
            unpriced=charge.unpriced,
        )
        task, turn = await store.tasks.finish_turn(turn, outcome)
        await store.audit.record("task_adopted", who.owner_id, task.id, found.engine)
    log.info("task %s adopted %s session %s", task.id, found.engine, found.session_id)
    return task, turn


class Adoption:
    """``/adopt``: the owner's terminal session becomes a task of this chat, whose card (the
    session's last answer, how to go on at the terminal) the chat gets at once. The machine's
    sessions are its owners' (``Settings.owners``): anyone else is refused before a session
    file is looked at, so the refusal says nothing of the session, not even that it exists."""

    def __init__(
        self,
        *,
        workdirs: WorkdirPolicy,
        engines: Collection[Engine],
        session_mode: ApprovalMode,
        store: Store,
        notifier: Notifier,
        environ: Mapping[str, str],
        owners: Collection[int],
        prices: PriceList,
    ) -> None:
        """``engines``: those tasks may use here; ``session_mode``: the chat sessions' mode
        (an adopted session's is ``adopted_mode`` of it)."""
        self._workdirs = workdirs
        self._engines = engines
        self._session_mode = session_mode
        self._store = store
        self._notifier = notifier
        self._environ = environ  # where the agents' session files are (their HOME)
        self._owners = frozenset(owners)
        self._prices = prices

    async def adopt(self, user_id: int, chat_id: int, locale: str, typed: str) -> Task:
        if user_id not in self._owners:
            log.warning("user %s may not adopt this machine's sessions", user_id)
            raise UserInputError("adopt.not_owner")
        # the session files are walked and read on a thread: never on the event loop
        found, where = await asyncio.to_thread(
            locate, self._environ, self._workdirs, tuple(self._engines), typed
        )
        who = Adoptee(user_id, chat_id, locale, adopted_mode(self._session_mode))
        async with self._store.atomic():  # the task exists with its card, or not at all
            task, turn = await record(self._store, found, where, who, self._prices)
            await self._notifier.turn_finished(task, turn)
        return task
