"""The usage windows an engine reports while its turns run (Claude: a ``rate_limit_event``
past the API's threshold, once per process): the latest of each is stored for /limits, and the
owner of the task that reported it gets ONE warning when a window passes the warning share —
once per window (until its reset), however many tasks and processes report it again. Silent:
nothing stopped, it is for the next look at the chat."""

from __future__ import annotations

import logging

from bot.events import WindowReported
from bot.models import MessageKind, Task
from bot.store import Store
from bot.telegram.notifier import Notifier
from bot.telegram.texts import Texts
from bot.turns.outcome import local_time

log = logging.getLogger(__name__)


class UsageWarnings:
    def __init__(self, store: Store, notifier: Notifier, warn_percent: float, timezone: str):
        """``warn_percent``: the share of a window (DETACH_LIMIT_WARN_PERCENT) past which the
        owner is told; ``timezone``: for owners who set no /tz."""
        self._store = store
        self._notifier = notifier
        self._warn_at = warn_percent / 100
        self._timezone = timezone

    async def reported(self, task: Task, event: WindowReported) -> None:
        warn = await self._store.windows.report(
            task.engine, event.window, event.used, event.resets_at, self._warn_at
        )
        log.info(
            "%s: window %s at %s (task %s)%s",
            task.engine,
            event.window,
            event.used,
            task.id,
            "; warned" if warn else "",
        )
        if not warn or event.used is None:
            return
        loc = task.locale
        zone = await self._store.users.tz(task.owner_id) or self._timezone
        resets = (
            self._notifier.text(loc, "limits.resets", at=local_time(event.resets_at, zone))
            if event.resets_at is not None
            else ""
        )
        text = self._notifier.text(
            loc,
            "limits.warning",
            engine=task.engine.capitalize(),
            window=window_name(self._notifier.texts, loc, event.window),
            percent=round(event.used * 100),
            resets=resets,
        )
        await self._notifier.send(task, text, MessageKind.STATUS)


def window_name(texts: Texts, loc: str, window: str) -> str:
    """ "five-hour", "weekly"… in the owner's language; an unknown window by its own name."""
    key = f"limits.window.{window}"
    try:
        return texts.template(loc, key)
    except KeyError:
        return window
