"""How the bot launches `detach mcp --parent <task>` for an agent that may start sub-tasks,
without handing that agent a secret.

The agent's CLI starts the server from a ``--mcp-config`` file it is given, so everything in
that file (and the server's environment) is as readable to the agent as its own: it holds the
data directory, the users and the limits, and this code's path, never the bot's token nor the
database's URL (a password on PostgreSQL). The URL goes into a private settings file
(``<data dir>/private/subtasks.env``, 0600, in the data directory sandboxed commands cannot
read), which the server reads as every `detach` command reads its settings file. The config
file itself is written in that same private directory (``private_dir``), 0600, and removed
after the turn.

The command itself is the relay (bot.mcp.relay), which hands the server's start to the
process's MCP zygote (bot.zygote, started here by ``Zygote``) and falls back to a
plain `detach mcp` without it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from bot.config import ENV_FILE_VAR
from bot.mcp import relay
from bot.models import McpServerSpec
from bot.settings import Settings

PRIVATE_DIR = "private"  # in the data directory: the bot's own files, none for an agent
SECRETS_FILE = "subtasks.env"
log = logging.getLogger(__name__)
ZYGOTE_SOCKET = "mcp-zygote"  # a socket
STOP_S = 2.0
ZYGOTE_AFTER_START_S = 10.0  # after a start, the first poll and its updates go first
AHEAD_SEND_S = 1.0  # the zygote reads one header at a time, each within a second


def private_dir(settings: Settings) -> Path:
    """``<data dir>/private``: made 0700 on first use."""
    path = settings.data_dir.resolve() / PRIVATE_DIR
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def subtask_env(settings: Settings) -> dict[str, str]:
    """The environment of `detach mcp --parent N`: what it needs to reach this bot, with no
    secret in it (the database is named by the private settings file, ``DETACH_ENV_FILE``)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", ""),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "DETACH_DATA_DIR": str(settings.data_dir.resolve()),
        "DETACH_ALLOWED_USERS": ",".join(str(u) for u in sorted(settings.allowed_users)),
        "DETACH_MAX_PROMPT_CHARS": str(settings.max_prompt_chars),
        "DETACH_MAX_SUBTASKS": str(settings.max_subtasks),
        "DETACH_MAX_CONCURRENT_TURNS": str(settings.max_concurrent_turns),
        "DETACH_NOTIFY_GAP_S": str(settings.notify_gap_s),
        "DETACH_NOTIFY_MAX": str(settings.notify_max),
        "DETACH_PREFLIGHT_WAIT_S": str(settings.preflight_wait_s),
        "DETACH_ASK_UNATTENDED": "yes" if settings.ask_unattended else "no",
        # this process's own (a bot and its workers may share a data directory)
        relay.SOCKET_VAR: str(private_dir(settings) / f"{ZYGOTE_SOCKET}-{os.getpid()}"),
    }
    env[ENV_FILE_VAR] = str(_secrets_file(settings, settings.resolved_database_url))
    return {k: v for k, v in env.items() if v}


def _secrets_file(settings: Settings, url: str) -> Path:
    """The private settings file holding the database URL (rewritten at each start)."""
    path = private_dir(settings) / SECRETS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(f"DETACH_DATABASE_URL={_quoted(url)}\n")
    return path


def _quoted(value: str) -> str:
    """A value as a dotenv file reads it back whole (single quotes: no interpolation)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def mcp_command() -> tuple[str, ...]:
    """`detach mcp` as an agent's CLI starts it: the relay, with no site and no project path
    (it needs only the standard library)."""
    return (sys.executable, "-I", "-S", relay.__file__, "mcp")


def relay_argv(server: McpServerSpec) -> list[str] | None:
    """The argv the relay of ``server`` hands the zygote (``mcp …``); None: not a relay."""
    *start, first = mcp_command()
    given = (server.command, *server.args)
    if given[: len(start)] != tuple(start) or given[len(start) : len(start) + 1] != (first,):
        return None
    return list(given[len(start) :])


class Zygote:
    """This process's MCP zygote (bot.zygote), started at the first turn that gives its
    agent `detach mcp` (``wanted``; not waited for: until its socket is there, relays start a
    plain `detach mcp`), stopped by ``aclose`` and by the kernel if this process dies first.
    Its environment holds no secret."""

    def __init__(self, settings: Settings) -> None:
        env = subtask_env(settings)
        self._env = {k: v for k, v in env.items() if k != ENV_FILE_VAR}
        self._started: asyncio.Task[asyncio.subprocess.Process | None] | None = None
        self._soon: asyncio.TimerHandle | None = None
        self._asking: set[asyncio.Task[None]] = set()

    def ahead(self, server: McpServerSpec, env: Mapping[str, str], cwd: Path) -> None:
        """As an agent's CLI is spawned with ``server`` (in ``env``, in ``cwd``): the zygote
        forks it now (bot.zygote, "ahead"), so it is ready when the CLI starts it; not waited
        for. Nothing when the zygote is not running yet or ``server`` is not `detach mcp`."""
        argv = relay_argv(server)
        # the owner tools' server only (`--task`): a sub-task tree's (`--parent`) forked ahead
        # was seen to stall its first `start` under load (1 in 4 runs, four at once): not yet
        if argv is None or argv[1:2] != ["--task"]:
            return
        if self._started is None or not self._started.done():
            return
        # the relay's directory as it reads it (os.getcwd: no symbolic link)
        where = os.path.realpath(cwd)
        header = {"ahead": True, "argv": argv, "env": {**env, **server.env}, "cwd": where}
        asking = asyncio.get_running_loop().create_task(self._ask_ahead(header))
        self._asking.add(asking)
        asking.add_done_callback(self._asking.discard)

    async def _ask_ahead(self, header: dict[str, object]) -> None:
        body = json.dumps(header).encode()
        try:
            async with asyncio.timeout(AHEAD_SEND_S):
                _, writer = await asyncio.open_unix_connection(self._env[relay.SOCKET_VAR])
                try:
                    writer.write(len(body).to_bytes(4, "big") + body)
                    await writer.drain()
                finally:
                    writer.close()
        except (OSError, TimeoutError) as exc:  # the relay gets a fresh fork
            log.debug("the MCP zygote was not asked ahead: %s", exc)

    def soon(self, delay_s: float) -> None:
        """Started ``delay_s`` from now if no turn wanted it before: a bot whose walk-away
        tasks get the owner tools has it ready for its first one, without slowing its start."""
        self._soon = asyncio.get_running_loop().call_later(delay_s, self.wanted)

    def wanted(self) -> None:
        if self._started is None:
            self._started = asyncio.get_running_loop().create_task(self._start())

    async def _start(self) -> asyncio.subprocess.Process | None:
        try:
            return await self._spawn()
        except OSError as exc:  # the relays start the plain command
            log.warning("the MCP zygote did not start: %s", exc)
            return None

    async def _spawn(self) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-P",  # never a `bot` package of the directory it starts in
            "-m",
            "bot.zygote",
            self._env[relay.SOCKET_VAR],
            env=self._env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
        )

    async def aclose(self) -> None:
        if self._soon is not None:
            self._soon.cancel()
        for asking in self._asking:
            asking.cancel()
        if self._started is None:
            return
        proc = await self._started
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), STOP_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
