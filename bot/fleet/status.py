"""What /status says of the runners on a shared database: each one's name, host, when it was
last heard from, how many turns it runs and its engines; a lapsed one is marked lost. And
what /hosts (and the board) says of their hosts (``HostLine``, from bot.fleet.hosts): whether
each is online and since when, its slots in use, runners, engines as its probes said them, the
usage windows its engines reported there and its projects, in the reader's language."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from bot.fleet.hosts import BEATS_PER_LEASE, HostLine, host_lines
from bot.store import EnginePresence, Runner, Store
from bot.store.db import utcnow
from bot.telegram.render import duration
from bot.telegram.texts import Texts

__all__ = [
    "EnginePresence",
    "FleetStatus",
    "HostLine",
    "RunnerLine",
    "host_text",
    "hosts_text",
]

SEEN_WITHIN_LEASES = 4  # a runner gone longer than this many leases is no longer listed


@dataclass(frozen=True, slots=True)
class RunnerLine:
    runner: Runner
    seen_s: float  # seconds since its last heartbeat
    lost: bool  # its lease lapsed (or it stopped)


class FleetStatus:
    def __init__(self, store: Store, lease_s: float, shared: bool) -> None:
        self._store = store
        self._lease_s = lease_s
        self.shared = shared  # False: one process, nothing to list

    @property
    def beat_s(self) -> float:
        """How often runners renew their lease (and announce their presence)."""
        return self._lease_s / BEATS_PER_LEASE

    async def runners(self) -> list[RunnerLine]:
        if not self.shared:
            return []
        now = utcnow()
        found = await self._store.runners.listed(self._lease_s * SEEN_WITHIN_LEASES)
        return [RunnerLine(r, (now - r.heartbeat_at).total_seconds(), r.lapsed(now)) for r in found]

    async def hosts(self) -> list[HostLine]:
        """/hosts: every host on record, online or not (none in one process), with the usage
        windows its engines reported there (each host its own plan)."""
        if not self.shared:
            return []
        return host_lines(await self._store.runners.every(), utcnow())


def hosts_text(texts: Texts, loc: str, hosts: Sequence[HostLine]) -> str:
    """Every host, online ones first; what each announced (its engines' probe lines)."""
    if not hosts:
        return texts.get(loc, "hosts.none")
    lines = [texts.get(loc, "hosts.title")]
    for host in hosts:
        lines += ["", *host_text(texts, loc, host)]
    return "\n".join(lines)


def host_text(texts: Texts, loc: str, host: HostLine) -> list[str]:
    """One host's lines (HTML): its state, runners, engines, usage windows and projects."""
    ago = duration(host.since_s)
    if host.online:
        head = texts.get(
            loc, "hosts.online", host=host.host, online=ago, running=host.running, slots=host.slots
        )
    else:
        head = texts.get(loc, "hosts.offline", host=host.host, seen=ago)
    lines = [head, texts.get(loc, "hosts.runners", names=", ".join(host.runners))]
    if host.engines:
        engines = " · ".join(_engine(texts, loc, e) for e in host.engines)
        lines.append(texts.raw(loc, "hosts.engines", engines=engines))
    if host.windows:
        lines.append(texts.get(loc, "hosts.windows", windows=_windows(texts, loc, host)))
    if host.projects:
        projects = ", ".join(
            f"<b>{html.escape(name)}</b> <code>{html.escape(path)}</code>"
            for name, path in host.projects
        )
        lines.append(texts.raw(loc, "hosts.projects", projects=projects))
    else:
        lines.append(texts.get(loc, "hosts.no_projects"))
    return lines


def _engine(texts: Texts, loc: str, engine: EnginePresence) -> str:
    """An engine as its host's probe said it, in the reader's language (a line a newer host
    says in words this bot has no message for: its name)."""
    if not engine.available:
        return texts.get(loc, "hosts.engine_off", name=engine.name)
    try:
        said = texts.say(loc, engine.line or engine.name)
    except (KeyError, IndexError, ValueError):
        said = html.escape(engine.name, quote=False)
    return said if engine.sandbox else texts.raw(loc, "hosts.no_sandbox", name=said)


def _windows(texts: Texts, loc: str, host: HostLine) -> str:
    """Each engine's windows as used now: ``claude five-hour 40 %``."""
    shown = []
    for w in host.windows:
        try:
            name = texts.template(loc, f"limits.window.{w.window}")
        except KeyError:
            name = w.window
        used = f"{round(w.used * 100)} %" if w.used is not None else "?"
        shown.append(f"{w.engine} {name} {used}")
    return " · ".join(shown)
