"""The MCP zygote: one process per bot (or worker) that imports `detach mcp` once and forks a
server for each agent that starts one (through bot.mcp.relay), so an agent's Detach tools are
ready in milliseconds instead of the seconds a fresh interpreter spends importing the MCP SDK,
SQLAlchemy and pydantic-settings.

Contract: ``python -m bot.zygote SOCKET``, started by the bot with an environment that holds
no secret (bot.mcp.launch), dies with the process that started it (``PR_SET_PDEATHSIG``). It
reads nothing and opens nothing before a fork: no settings, no database, no event loop, no
thread (a fork copies only the imports). On a connection on SOCKET (0600, in the bot's private
directory, which no sandboxed command can see) it takes the relay's header — argv, environment,
directory — and its stdin, stdout and stderr (``SCM_RIGHTS``); only `mcp …` is served. The fork
becomes exactly the `detach mcp …` the relay stands for, in the relay's environment and
directory and on its descriptors, answers ``+``, sends its exit status as one byte at the end,
and exits at once when the relay's connection closes (its agent is gone).

Ahead: a fork made before its relay comes (bot.zygote_ahead)."""

from __future__ import annotations

import array
import contextlib
import ctypes
import gc
import json
import os
import signal
import socket
import sys
import time
import traceback
from pathlib import Path

from bot.zygote_ahead import fork_ahead, handed, in_fork
from bot.zygote_forks import HEADER_MAX, READ_S, become, flushed, rest

PR_SET_PDEATHSIG = 1


def serve(path: Path) -> None:
    """Accept relays on ``path`` until killed."""
    _die_with_parent()
    _preload()
    gc.freeze()  # what the forks share stays shared (no collector writes to it)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # forks are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    umask = os.umask(0o177)
    try:
        listener.bind(str(path))
    finally:
        os.umask(umask)
    listener.listen(64)
    signal.signal(signal.SIGTERM, lambda *_: _gone(path))
    while True:
        conn, _ = listener.accept()
        _one(listener, conn)


def _gone(path: Path) -> None:
    """Stopped: the socket goes with the zygote (its forks keep their connections)."""
    with contextlib.suppress(OSError):
        path.unlink()
    os._exit(0)


def _one(listener: socket.socket, conn: socket.socket) -> None:
    fds: list[int] = []
    try:
        conn.settimeout(READ_S)
        header, fds = _received(conn)
        if not _served(header):
            conn.sendall(b"-")
        elif not fds:
            fork_ahead(listener, conn, header)
        elif not handed(conn, header, fds):
            _fork(listener, conn, header, fds)
    except (OSError, ValueError):
        pass
    finally:
        conn.close()
        for fd in fds:
            os.close(fd)


def _fork(listener: socket.socket, conn: socket.socket, header: dict, fds: list[int]) -> None:
    if os.fork() != 0:
        return
    in_fork(listener)  # the server
    code = 1
    try:
        code = become(conn, header, fds)
    except BaseException:  # as the plain command would: its trace on the agent's stderr
        traceback.print_exc()
    finally:
        flushed()
        os._exit(code)


def _received(conn: socket.socket) -> tuple[dict, list[int]]:
    """The relay's header and its three descriptors, or an ahead header and none (anything
    else: ValueError), within READ_S in all (one at a time is read: a slow one must not hold
    the others)."""
    deadline = time.monotonic() + READ_S
    fds = array.array("i")
    data, ancdata, _flags, _addr = conn.recvmsg(4 + HEADER_MAX, socket.CMSG_LEN(3 * fds.itemsize))
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    taken = list(fds)
    try:
        if len(taken) not in (0, 3) or len(data) < 4:
            raise ValueError("no descriptors")
        size = int.from_bytes(data[:4], "big")
        if size > HEADER_MAX:
            raise ValueError("header too large")
        header = json.loads(rest(conn, data[4:], size, deadline))
        if not isinstance(header, dict) or (header.get("ahead") is True) != (not taken):
            raise ValueError("not a header")
    except (ValueError, OSError):
        for fd in taken:
            os.close(fd)
        raise
    return header, taken


def _served(header: dict) -> bool:
    argv, env, cwd = header.get("argv"), header.get("env"), header.get("cwd")
    return (
        isinstance(argv, list)
        and bool(argv)
        and argv[0] == "mcp"
        and all(isinstance(a, str) for a in argv)
        and isinstance(env, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
        and isinstance(cwd, str)
    )


def _preload() -> None:
    """What `detach mcp` imports, once (a fork shares it)."""
    import aiosqlite  # noqa: F401  (the store's driver: imported as the fork opens it, else)
    import anyio._backends._asyncio  # noqa: F401  (the MCP SDK's event loop, else at its start)
    import mcp.server.stdio  # noqa: F401

    import bot.cli  # noqa: F401
    import bot.mcp.command  # noqa: F401
    import bot.money.presets  # noqa: F401
    import bot.tasks.console  # noqa: F401
    import bot.tasks.owner_ask  # noqa: F401


def _die_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() == 1:  # the parent was gone before prctl
        sys.exit(0)


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
