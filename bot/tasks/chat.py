"""A chat's settings as its owner sets them: the working directory (/cd), which task messages
make the phone buzz (/notify), the owner's time zone (/tz) and the engines' usage limits in it,
the host its new tasks are pinned to (/host)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from pathlib import Path

from bot.errors import UserInputError
from bot.models import Engine, NotifyPolicy
from bot.store import Store
from bot.tasks.placing import PROJECT, Placement
from bot.telegram.policies import ChatPolicies
from bot.turns.outcome import local_time
from bot.turns.queue import TurnQueue
from bot.workdirs import WorkdirPolicy


class ChatSettings:
    def __init__(
        self,
        *,
        store: Store,
        policies: ChatPolicies,
        queue: TurnQueue,
        workdirs: WorkdirPolicy,
        current_dir: Callable[[int], Awaitable[Path]],
        engines: Collection[Engine],
        timezone: str,
        placement: Placement,
    ) -> None:
        """``current_dir``: the chat's directory (``TaskPlanner.current_dir``); ``engines``:
        those tasks may use here; ``timezone``: for owners who set no /tz."""
        self._store = store
        self._policies = policies
        self._queue = queue
        self._workdirs = workdirs
        self.current_dir = current_dir
        self._engines = engines
        self._timezone = timezone
        self._placement = placement

    async def zone(self, user_id: int) -> str:
        """The user's time zone (/tz), else the machine's."""
        return await self._store.users.tz(user_id) or self._timezone

    async def engine_limits(self, user_id: int) -> list[tuple[Engine, str]]:
        """Engines whose usage limit is reached now, and when it resets in the user's zone."""
        zone = await self.zone(user_id)
        limited = []
        for engine in sorted(self._engines):
            until = await self._queue.limited_until(engine)
            if until is not None:
                limited.append((engine, local_time(until, zone)))
        return limited

    async def notify_policy(self, chat_id: int) -> NotifyPolicy:
        return await self._policies.get(chat_id)

    async def set_notify_policy(self, chat_id: int, typed: str) -> NotifyPolicy:
        """``/notify all|done|quiet``: which task messages of this chat make the phone buzz."""
        try:
            policy = NotifyPolicy(typed.strip().lower())
        except ValueError:
            raise UserInputError("error.bad_notify", value=typed.strip()) from None
        await self._policies.set(chat_id, policy)
        return policy

    async def change_dir(self, chat_id: int, typed: str) -> str:
        """``/cd DIR`` (inside an allowed directory) or ``/cd project:x`` (on a shared database:
        each host's own path of it, as ``cwd=project:x``)."""
        if typed.strip().startswith(PROJECT):
            place = await self._placement.place({"cwd": typed.strip()}, None)
            if place.project is not None:
                chosen = f"{PROJECT}{place.project}"
                await self._store.chats.set_cwd(chat_id, chosen)
                return chosen
            typed = str(place.cwd)  # one process: this machine's path of the project
        path = self._workdirs.resolve(typed, await self.current_dir(chat_id))
        await self._store.chats.set_cwd(chat_id, str(path))
        return str(path)

    async def shown_dir(self, chat_id: int) -> str:
        """Where this chat's tasks run: its /cd project, else its directory."""
        stored = (await self._store.chats.get(chat_id)).cwd
        if stored and stored.startswith(PROJECT):
            return stored
        return str(await self.current_dir(chat_id))

    async def host(self, chat_id: int) -> str | None:
        """The host this chat's new tasks are pinned to (/host; None: any that fits)."""
        return (await self._store.chats.get(chat_id)).host or None

    async def set_host(self, chat_id: int, typed: str) -> str | None:
        """``/host <name>|any``: a host the fleet knows, or none."""
        host = await self._placement.host_named(typed)
        await self._store.chats.set_host(chat_id, host)
        return host
