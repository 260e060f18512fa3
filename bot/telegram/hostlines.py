"""What /hosts says of each host (``HostLine``), in the reader's language: whether it is
online and since when, its slots in use, runners, engines (as its probes said them), the usage
windows its engines reported there and its projects. The board shows the same lines."""

from __future__ import annotations

import html
from collections.abc import Sequence

from bot.fleet.hosts import HostLine
from bot.store import EnginePresence
from bot.telegram.render import duration
from bot.telegram.texts import Texts


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
