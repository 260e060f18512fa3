"""Where a new task may run (issue #57): pinned to a host (``host=``, else the chat's /host;
``host=any``: none) and in a project (``cwd=project:x``), which each host resolves to its own
directory when it claims the turn. On one process there is one host: a pin is refused, a
project is this process's own directory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.errors import UserInputError
from bot.fleet.hosts import HostLine, host_lines
from bot.store import Store
from bot.store.db import utcnow

ANY = "any"
PROJECT = "project:"


@dataclass(frozen=True, slots=True)
class Place:
    """A task's host pin and project; ``cwd``: the project's directory (None: no project);
    ``here``: that directory is on this machine (else it is only another host's word)."""

    host: str | None = None
    project: str | None = None
    cwd: Path | None = None
    here: bool = True


class Placement:
    def __init__(self, store: Store, projects: Mapping[str, Path], shared: bool) -> None:
        """``projects``: this process's (DETACH_PROJECTS); ``shared``: a scale-out database."""
        self._store = store
        self._projects = dict(projects)
        self.shared = shared

    async def hosts(self) -> list[HostLine]:
        """The hosts on record, online ones first (none in one process)."""
        if not self.shared:
            return []
        return host_lines(await self._store.runners.every(), utcnow())

    async def host_named(self, typed: str) -> str | None:
        """A host name as typed (``any``: None), known to the fleet, or a clear refusal."""
        name = typed.strip()
        if name.lower() == ANY:
            return None
        if not self.shared:
            raise UserInputError("error.host_one_process")
        known = [h.host for h in await self.hosts()]
        if name not in known:
            raise UserInputError("error.host_unknown", host=name, known=", ".join(known) or "–")
        return name

    async def place(
        self, options: Mapping[str, str], chat_host: str | None, chat_cwd: str | None = None
    ) -> Place:
        """``host=`` (else the chat's default) and ``cwd=project:x`` (else the chat's /cd
        project; a pinned task's host must have the project)."""
        host = await self.host_named(options["host"]) if "host" in options else None
        if "host" not in options and chat_host and self.shared:
            host = chat_host
        typed = options.get("cwd", chat_cwd or "")
        if not typed.startswith(PROJECT):
            return Place(host)
        return await self._project(typed.removeprefix(PROJECT).strip(), host)

    async def _project(self, name: str, host: str | None) -> Place:
        hosts = await self.hosts()
        if host is not None:  # pinned: that host must have the project, or it never runs
            hosts = [h for h in hosts if h.host == host]
        announced = {n: p for h in hosts for n, p in h.projects}
        if name in self._projects and (host is None or not self.shared):
            return Place(host, name if self.shared else None, self._projects[name])
        if name not in announced:
            known = sorted({*announced, *([] if host else self._projects)})
            raise UserInputError("error.project_unknown", project=name, known=", ".join(known))
        here = str(self._projects.get(name, "")) == announced[name]
        return Place(host, name, Path(announced[name]), here=here)

    async def online(self, host: str) -> bool:
        return any(h.host == host and h.online for h in await self.hosts())
