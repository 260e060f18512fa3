"""The bot's own git where an agent may have written (a task's directory, its worktree, a ``.git``
the agent made): run confined, so that what the repository's configuration makes git start
runs inside the sandbox whatever key a list missed.

Every command runs in bubblewrap (where it works here): the whole filesystem read-only, the
denied paths hidden (``executors.denied``: the bot's settings, its database, the owner's keys),
no network, its own process namespace, with every transport closed by the environment and the
overrides of ``executors.gitscope`` (listed first by ``git config --list``, which runs nothing).
Only an operation that must write gets writable paths: the git directories (``GitDirs``) and,
for a merge, the checkout. Where bubblewrap cannot run, git runs unconfined with the same
environment and overrides (``confined`` says so, and ``/status`` shows it)."""

from __future__ import annotations

import asyncio
import functools
import shutil
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from bot.models import TurnSpec
from executors import gitsession, sandbox
from executors.gitscope import BASE, ENV, FIXED, OUTSIDE, Scope, foreign, from_listing, marked_top
from executors.gitwarm import WarmJail

GIT_TIMEOUT_S = 60.0
UNREADABLE = "git cannot read this repository's configuration"
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Git:
    code: int
    out: str
    err: str


@dataclass(frozen=True, slots=True)
class GitDirs:
    """A work tree's git directory and the common one (the same for a main checkout)."""

    gitdir: Path
    common: Path


class GitGuard:
    """Runs the bot's git; ``denied``: the paths hidden from it (asked at each command);
    ``confine``: bubblewrap where it works (off only to show, in a test, what it holds);
    ``warm``: ``prepare`` starts a baseline's jail ahead (``executors.gitwarm``; its owner
    calls ``aclose``)."""

    def __init__(
        self,
        denied: Callable[[], Iterable[Path]] = tuple,
        confine: bool = True,
        home: str | None = None,
        warm: bool = False,
    ) -> None:
        self._denied = denied
        self._confine = confine
        self._home = home  # None: the home of the moment (as git itself would)
        self._warm = WarmJail() if warm else None

    async def confined(self) -> bool:
        """Whether the bot's git runs in bubblewrap here (False: bwrap missing or broken)."""
        return await self._jail() is not None

    async def _jail(self) -> str | None:
        """bubblewrap's path (None: unconfined here): probed once, off the loop; once known,
        without a thread's round trip (one on each git read's way: ~0.2 ms idle, over 1 ms
        beside a turn's store work)."""
        if not self._confine:
            return None
        if _bwrap.cache_info().currsize:
            return _bwrap()
        return await asyncio.to_thread(_bwrap)

    async def scope(self, cwd: Path | str, timeout_s: float = GIT_TIMEOUT_S) -> Scope:
        """The overrides for git in ``cwd``, or why git is not run there."""
        args = ("config", "--list", "--show-scope", "--show-origin", "--null")
        try:
            listed = await self._run(cwd, args, BASE, timeout_s, ())
        except OSError as exc:  # no git here: nothing of it will run either
            return Scope(FIXED, f"git cannot run: {exc}")
        if listed.code != 0:
            return Scope(FIXED, listed.err or UNREADABLE)
        top, why = await asyncio.to_thread(_top_and_foreign, Path(cwd))
        return from_listing(listed.out, top, why)

    async def batch(
        self, cwd: Path | str, *commands: tuple[str, ...], timeout_s: float = GIT_TIMEOUT_S
    ) -> tuple[Scope, list[Git]]:
        """``scope`` of ``cwd`` and, unless it refuses, each of ``commands`` run under it (as
        ``git`` with ``within``), in one jail (``executors.gitsession``: one bubblewrap start
        instead of one for each); refused: no command runs. Without bubblewrap or bash here,
        as ``scope`` then ``git``, each command on its own."""
        bwrap, bash = await self._jail(), _bash()
        if bwrap is None or bash is None:
            scope = await self.scope(cwd, timeout_s)
            if scope.refusal is not None:
                return scope, []
            each = [self._run(cwd, args, scope, timeout_s, ()) for args in commands]
            return scope, list(await asyncio.gather(*each))
        env = BASE.env(self._home or str(Path.home()))
        argv_for = functools.partial(self._session_argv, str(cwd), commands, bwrap, bash)
        taken = await self._warm.take(str(cwd), commands, argv_for, env) if self._warm else None
        if taken is not None:
            proc, token = taken
        else:
            token = gitsession.nonce()
            proc = await _spawn(argv_for(token), env)
        place = asyncio.ensure_future(asyncio.to_thread(_top_and_foreign, Path(cwd)))

        decided: list[Scope] = []

        async def decide(code: int, listing: str) -> Scope:
            top, why = await place
            decided.append(
                from_listing(listing, top, why) if code == 0 else Scope(FIXED, UNREADABLE)
            )
            return decided[0]

        try:
            async with asyncio.timeout(timeout_s):
                scope, done, err = await gitsession.converse(proc, token, len(commands), decide)
        except TimeoutError:  # as each command on its own would have timed out
            late = Git(124, "", f"git took longer than {timeout_s:.0f}s")
            if not decided:
                return Scope(FIXED, late.err), []
            return decided[0], [late] * len(commands) if decided[0].refusal is None else []
        finally:
            place.cancel()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        if scope.refusal is not None:
            return (Scope(FIXED, err) if scope.refusal == UNREADABLE and err else scope), []
        ran = [Git(code, out, err if code else "") for code, out in done]
        return scope, ran + [Git(128, "", err or "git did not run")] * (len(commands) - len(ran))

    async def git(
        self,
        cwd: Path | str,
        *args: str,
        timeout_s: float = GIT_TIMEOUT_S,
        within: Scope | None = None,
        writes: Iterable[Path | str] = (),
    ) -> Git:
        """Run git in ``cwd``, bounded, never prompting, confined (``writes``: the paths it
        may change), with the repository's program-running configuration neutralised
        (``within``: a Scope already read for ``cwd``)."""
        where = within or await self.scope(cwd, timeout_s)
        if where.refusal is not None:
            return Git(128, "", where.refusal)
        return await self._run(cwd, args, where, timeout_s, writes)

    async def prepare(
        self, cwd: Path | str, *commands: tuple[str, ...], after_s: float = 0.0
    ) -> None:
        """Start the jail the next ``batch`` of these commands in ``cwd`` takes (``warm``
        only, where bubblewrap and bash are: ``executors.gitwarm``); ``after_s``: that much
        later, in the background."""
        if self._warm is None:
            return
        if after_s > 0:  # nothing awaited on the caller's way
            self._warm.later(
                after_s, str(cwd), commands, functools.partial(self.prepare, cwd, *commands)
            )
            return
        bwrap, bash = await self._jail(), _bash()
        if bwrap is None or bash is None:
            return
        env = BASE.env(self._home or str(Path.home()))
        argv_for = functools.partial(self._session_argv, str(cwd), commands, bwrap, bash)
        await self._warm.prepare(str(cwd), commands, argv_for, env, _spawn)

    async def aclose(self) -> None:
        """Stop a jail started ahead (``prepare``)."""
        if self._warm is not None:
            await self._warm.aclose()

    def _session_argv(
        self, cwd: str, commands: tuple[tuple[str, ...], ...], bwrap: str, bash: str, token: str
    ) -> list[str]:
        inner = gitsession.argv(cwd, token, commands, bash)
        return sandbox.jail(inner, bwrap, [(Path(cwd), False)], self._denied())

    async def dirs(self, cwd: Path | str, within: Scope) -> GitDirs | None:
        """The git directories of the work tree holding ``cwd`` (what a commit writes)."""
        return _dirs(await self.git(cwd, *DIRS, within=within))

    async def scoped_dirs(self, cwd: Path | str) -> tuple[Scope, GitDirs | None]:
        """``scope`` and ``dirs`` of ``cwd`` in one jail (``batch``); None: refused or none."""
        scope, ran = await self.batch(cwd, DIRS)
        return scope, (_dirs(ran[0]) if ran else None)

    async def _run(
        self,
        cwd: Path | str,
        args: tuple[str, ...],
        where: Scope,
        timeout_s: float,
        writes: Iterable[Path | str],
    ) -> Git:
        argv = ["git", "--no-pager", "-C", str(cwd), *args]
        bwrap = await self._jail()
        if bwrap is not None:
            binds = [(Path(cwd), False), *((Path(w), True) for w in writes)]
            argv = sandbox.jail(argv, bwrap, binds, self._denied())
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=where.env(self._home or str(Path.home())),
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return Git(124, "", f"git {args[0]} took longer than {timeout_s:.0f}s")
        return Git(
            proc.returncode or 0,
            out.decode(errors="replace").strip(),
            err.decode(errors="replace").strip(),
        )


async def cli_env(cwd: Path, denied: Iterable[Path], sandboxed: bool) -> dict[str, str]:
    """What an agent CLI's environment gets for the git it runs itself in ``cwd`` at start
    (``Scope.cli_env``); outside a repository (no git process either), only that a bare
    repository's layout planted there is none (``safe.bareRepository``)."""
    if await asyncio.to_thread(marked_top, cwd) is None:
        return dict(OUTSIDE)
    kept = tuple(denied)
    return (await GitGuard(lambda: kept).scope(cwd)).cli_env(sandboxed)


async def turn_cli_env(spec: TurnSpec, sandboxed: bool) -> dict[str, str]:
    """``cli_env`` for a turn: as read with its baseline (``spec.git_env``), or read now."""
    if spec.git_env is not None:
        return dict(spec.git_env)
    return await cli_env(spec.cwd, spec.deny_read, sandboxed)


async def _spawn(argv: list[str], env: Mapping[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=dict(env),
    )


def _top_and_foreign(cwd: Path) -> tuple[Path | None, str | None]:
    top = marked_top(cwd)
    return top, foreign(top) if top is not None else None


DIRS = ("rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir")


def _dirs(found: Git) -> GitDirs | None:
    lines = found.out.splitlines()
    if found.code != 0 or len(lines) != 2:
        return None
    return GitDirs(Path(lines[0]), Path(lines[1]))


@functools.cache
def _bash() -> str | None:
    """bash, which runs a jail's several git commands (``executors.gitsession``)."""
    return shutil.which("bash", path=ENV["PATH"])


@functools.cache
def _bwrap() -> str | None:
    """bubblewrap's path when it runs here (probed once: user namespaces may be off)."""
    found = shutil.which("bwrap")
    if found is None:
        return None
    try:
        done = subprocess.run(
            sandbox.jail(["true"], found, [], ()),
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return found if done.returncode == 0 else None
